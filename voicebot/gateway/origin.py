"""The WebSocket ``Origin`` check: a page on another site must not talk to the bot with a
token it got hold of (``?token=`` in a link works from any page the browser opens).

Browsers always send ``Origin`` on a WebSocket handshake, so a missing one means a non-browser
client (the CLI, a server), which the token alone authenticates.
"""

from __future__ import annotations

from urllib.parse import urlsplit

LOCAL_HOSTS = {"localhost", "127.0.0.1", "::1"}


class OriginPolicy:
    def __init__(self, allowed: str) -> None:
        entries = {item.strip().rstrip("/").lower() for item in allowed.split(",") if item.strip()}
        self.any = "*" in entries
        self.same_origin = "self" in entries
        self.localhost = "localhost" in entries
        self.exact = entries - {"*", "self", "localhost"}

    def allows(self, origin: str | None, host: str | None) -> bool:
        """``host``: the request's Host header, which "self" compares against."""
        if origin is None or self.any:
            return True
        origin = origin.strip().rstrip("/").lower()
        if origin in self.exact:
            return True
        parts = urlsplit(origin)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            return False  # "null" (sandboxed frames, files) and anything odd
        if self.localhost and parts.hostname in LOCAL_HOSTS:
            return True
        return self.same_origin and host is not None and parts.netloc == host.strip().lower()
