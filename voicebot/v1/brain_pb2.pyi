from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class PrefillResult(_message.Message):
    __slots__ = ("started",)
    STARTED_FIELD_NUMBER: _ClassVar[int]
    started: bool
    def __init__(self, started: _Optional[bool] = ...) -> None: ...

class Commit(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class Prepare(_message.Message):
    __slots__ = ("session_id", "user_id")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    USER_ID_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    user_id: str
    def __init__(self, session_id: _Optional[str] = ..., user_id: _Optional[str] = ...) -> None: ...

class ConverseRequest(_message.Message):
    __slots__ = ("start", "commit", "prepare", "committed")
    START_FIELD_NUMBER: _ClassVar[int]
    COMMIT_FIELD_NUMBER: _ClassVar[int]
    PREPARE_FIELD_NUMBER: _ClassVar[int]
    COMMITTED_FIELD_NUMBER: _ClassVar[int]
    start: RespondRequest
    commit: Commit
    prepare: Prepare
    committed: bool
    def __init__(self, start: _Optional[_Union[RespondRequest, _Mapping]] = ..., commit: _Optional[_Union[Commit, _Mapping]] = ..., prepare: _Optional[_Union[Prepare, _Mapping]] = ..., committed: _Optional[bool] = ...) -> None: ...

class SpokenPart(_message.Message):
    __slots__ = ("turn_id", "text", "interrupted", "user_text")
    TURN_ID_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    INTERRUPTED_FIELD_NUMBER: _ClassVar[int]
    USER_TEXT_FIELD_NUMBER: _ClassVar[int]
    turn_id: str
    text: str
    interrupted: bool
    user_text: str
    def __init__(self, turn_id: _Optional[str] = ..., text: _Optional[str] = ..., interrupted: _Optional[bool] = ..., user_text: _Optional[str] = ...) -> None: ...

class RespondRequest(_message.Message):
    __slots__ = ("session_id", "turn_id", "user_id", "text", "language", "previous_reply", "session_context")
    class SessionContextEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    TURN_ID_FIELD_NUMBER: _ClassVar[int]
    USER_ID_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    LANGUAGE_FIELD_NUMBER: _ClassVar[int]
    PREVIOUS_REPLY_FIELD_NUMBER: _ClassVar[int]
    SESSION_CONTEXT_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    turn_id: str
    user_id: str
    text: str
    language: str
    previous_reply: SpokenPart
    session_context: _containers.ScalarMap[str, str]
    def __init__(self, session_id: _Optional[str] = ..., turn_id: _Optional[str] = ..., user_id: _Optional[str] = ..., text: _Optional[str] = ..., language: _Optional[str] = ..., previous_reply: _Optional[_Union[SpokenPart, _Mapping]] = ..., session_context: _Optional[_Mapping[str, str]] = ...) -> None: ...

class TextDelta(_message.Message):
    __slots__ = ("text",)
    TEXT_FIELD_NUMBER: _ClassVar[int]
    text: str
    def __init__(self, text: _Optional[str] = ...) -> None: ...

class ToolActivity(_message.Message):
    __slots__ = ("tool", "status", "detail")
    TOOL_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    tool: str
    status: str
    detail: str
    def __init__(self, tool: _Optional[str] = ..., status: _Optional[str] = ..., detail: _Optional[str] = ...) -> None: ...

class Handoff(_message.Message):
    __slots__ = ("reason", "summary")
    REASON_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    reason: str
    summary: str
    def __init__(self, reason: _Optional[str] = ..., summary: _Optional[str] = ...) -> None: ...

class Final(_message.Message):
    __slots__ = ("text", "dialog_state", "fallback")
    TEXT_FIELD_NUMBER: _ClassVar[int]
    DIALOG_STATE_FIELD_NUMBER: _ClassVar[int]
    FALLBACK_FIELD_NUMBER: _ClassVar[int]
    text: str
    dialog_state: str
    fallback: bool
    def __init__(self, text: _Optional[str] = ..., dialog_state: _Optional[str] = ..., fallback: _Optional[bool] = ...) -> None: ...

class Blocked(_message.Message):
    __slots__ = ("text", "reason")
    TEXT_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    text: str
    reason: str
    def __init__(self, text: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class RespondEvent(_message.Message):
    __slots__ = ("turn_id", "delta", "tool", "handoff", "final", "blocked")
    TURN_ID_FIELD_NUMBER: _ClassVar[int]
    DELTA_FIELD_NUMBER: _ClassVar[int]
    TOOL_FIELD_NUMBER: _ClassVar[int]
    HANDOFF_FIELD_NUMBER: _ClassVar[int]
    FINAL_FIELD_NUMBER: _ClassVar[int]
    BLOCKED_FIELD_NUMBER: _ClassVar[int]
    turn_id: str
    delta: TextDelta
    tool: ToolActivity
    handoff: Handoff
    final: Final
    blocked: Blocked
    def __init__(self, turn_id: _Optional[str] = ..., delta: _Optional[_Union[TextDelta, _Mapping]] = ..., tool: _Optional[_Union[ToolActivity, _Mapping]] = ..., handoff: _Optional[_Union[Handoff, _Mapping]] = ..., final: _Optional[_Union[Final, _Mapping]] = ..., blocked: _Optional[_Union[Blocked, _Mapping]] = ...) -> None: ...
