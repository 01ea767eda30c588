"""Structured logging: one JSON object per line, so log shippers need no parsing rules.

Personal data stays out by construction: the fields that carry what people said or who they
are (``CONTENT_FIELDS``) are redacted by the formatter, whatever the level and whichever module
logged them, unless an operator sets ``VOICEBOT_LOG_CONTENT=true`` to debug a call.
"""

from __future__ import annotations

import json
import logging
import re
import sys
import time
from typing import Any

from voicebot.common.config import SharedSettings

_STANDARD = set(logging.LogRecord("", 0, "", 0, "", (), None).__dict__) | {"message", "asctime"}
# extra={...} fields that hold speech, typed text, replies or a call's custom parameters.
CONTENT_FIELDS = frozenset({"text", "transcript", "early", "final", "user_text", "reply", "words",
                            "context", "custom_parameters", "line"})


# A credential in a URL's query (?token=, ?secret=, ...): uvicorn logs request paths with their
# query string. Never shown, whatever the switch.
URL_CREDENTIAL = re.compile(r"([?&](?:token|secret|key|api_key|password|access_token)=)[^&\s\"']+", re.I)


def scrub(message: str) -> str:
    return URL_CREDENTIAL.sub(r"\1<redacted>", message)


def redacted(value: Any) -> Any:
    """What is left of a content field: its size, and a mapping's keys (not its values)."""
    if isinstance(value, dict):
        return {str(key): "<redacted>" for key in value}
    if isinstance(value, str):
        return f"<redacted: {len(value)} chars>"
    return "<redacted>"


class JsonFormatter(logging.Formatter):
    def __init__(self, service: str, content: bool = False) -> None:
        super().__init__()
        self.service = service
        self.content = content

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "service": self.service,
            "logger": record.name,
            "msg": scrub(record.getMessage()),
        }
        # Anything passed with extra={...} becomes a field.
        for key, value in record.__dict__.items():
            if key not in _STANDARD and not key.startswith("_"):
                if key in CONTENT_FIELDS and not self.content:
                    value = redacted(value)
                entry[key] = scrub(value) if isinstance(value, str) else value
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


class PlainFormatter(logging.Formatter):
    """Lines for a terminal (no extra fields), credentials in URLs scrubbed all the same."""

    def format(self, record: logging.LogRecord) -> str:
        return scrub(super().format(record))


def setup_logging(service: str, level: str = "INFO", json_lines: bool = True,
                  content: bool | None = None) -> None:
    """``content``: log what people said (default: ``VOICEBOT_LOG_CONTENT``)."""
    handler = logging.StreamHandler(sys.stderr)
    if content is None:
        content = SharedSettings().log_content
    if json_lines:
        handler.setFormatter(JsonFormatter(service, content))
    else:
        handler.setFormatter(PlainFormatter(f"%(asctime)s {service} %(levelname)s %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # Third-party chatter that would drown our own lines.
    for noisy in ("httpx", "httpcore", "faster_whisper", "uvicorn.access"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
