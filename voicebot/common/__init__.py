"""Code every service needs, written once."""
