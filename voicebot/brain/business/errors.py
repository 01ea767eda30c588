"""The brain's configuration error, in a module of its own: the profile and the knowledge both
raise it, and neither has to import the other for it."""

from __future__ import annotations


class ProfileError(ValueError):
    """The profile file is missing, not YAML, or names a field wrongly: the message says which."""
