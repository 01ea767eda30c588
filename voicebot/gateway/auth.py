"""Bearer-token auth. The user id is whatever the token maps to; nothing a
client or a model says can change it."""

from __future__ import annotations

import hmac

from starlette.websockets import WebSocket


class TokenAuth:
    def __init__(self, tokens: dict[str, str]) -> None:
        self._tokens = tokens

    def user_for(self, token: str | None) -> str | None:
        if not token:
            return None
        found = None
        # Compare against every token in constant time: no early exit leaks which matched.
        for known, user in self._tokens.items():
            if hmac.compare_digest(known.encode(), token.encode()):
                found = user
        return found

    def authenticate(self, websocket: WebSocket) -> str | None:
        header = websocket.headers.get("authorization", "")
        token = header[7:].strip() if header.lower().startswith("bearer ") else None
        return self.user_for(token or websocket.query_params.get("token"))
