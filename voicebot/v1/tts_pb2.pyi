from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class SynthesisConfig(_message.Message):
    __slots__ = ("session_id", "turn_id", "voice", "sample_rate", "language", "sentence_with_first_audio")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    TURN_ID_FIELD_NUMBER: _ClassVar[int]
    VOICE_FIELD_NUMBER: _ClassVar[int]
    SAMPLE_RATE_FIELD_NUMBER: _ClassVar[int]
    LANGUAGE_FIELD_NUMBER: _ClassVar[int]
    SENTENCE_WITH_FIRST_AUDIO_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    turn_id: str
    voice: str
    sample_rate: int
    language: str
    sentence_with_first_audio: bool
    def __init__(self, session_id: _Optional[str] = ..., turn_id: _Optional[str] = ..., voice: _Optional[str] = ..., sample_rate: _Optional[int] = ..., language: _Optional[str] = ..., sentence_with_first_audio: _Optional[bool] = ...) -> None: ...

class SynthesizeRequest(_message.Message):
    __slots__ = ("config", "text")
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    config: SynthesisConfig
    text: str
    def __init__(self, config: _Optional[_Union[SynthesisConfig, _Mapping]] = ..., text: _Optional[str] = ...) -> None: ...

class SentenceStarted(_message.Message):
    __slots__ = ("index", "text")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    index: int
    text: str
    def __init__(self, index: _Optional[int] = ..., text: _Optional[str] = ...) -> None: ...

class AudioChunk(_message.Message):
    __slots__ = ("pcm16", "sample_rate", "sentence_index", "sentence", "sentence_started_ms_ago")
    PCM16_FIELD_NUMBER: _ClassVar[int]
    SAMPLE_RATE_FIELD_NUMBER: _ClassVar[int]
    SENTENCE_INDEX_FIELD_NUMBER: _ClassVar[int]
    SENTENCE_FIELD_NUMBER: _ClassVar[int]
    SENTENCE_STARTED_MS_AGO_FIELD_NUMBER: _ClassVar[int]
    pcm16: bytes
    sample_rate: int
    sentence_index: int
    sentence: SentenceStarted
    sentence_started_ms_ago: float
    def __init__(self, pcm16: _Optional[bytes] = ..., sample_rate: _Optional[int] = ..., sentence_index: _Optional[int] = ..., sentence: _Optional[_Union[SentenceStarted, _Mapping]] = ..., sentence_started_ms_ago: _Optional[float] = ...) -> None: ...

class SentenceDone(_message.Message):
    __slots__ = ("index", "duration_ms")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    DURATION_MS_FIELD_NUMBER: _ClassVar[int]
    index: int
    duration_ms: int
    def __init__(self, index: _Optional[int] = ..., duration_ms: _Optional[int] = ...) -> None: ...

class SynthesisError(_message.Message):
    __slots__ = ("sentence_index", "message")
    SENTENCE_INDEX_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    sentence_index: int
    message: str
    def __init__(self, sentence_index: _Optional[int] = ..., message: _Optional[str] = ...) -> None: ...

class SynthesizeEvent(_message.Message):
    __slots__ = ("sentence_started", "audio", "sentence_done", "error")
    SENTENCE_STARTED_FIELD_NUMBER: _ClassVar[int]
    AUDIO_FIELD_NUMBER: _ClassVar[int]
    SENTENCE_DONE_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    sentence_started: SentenceStarted
    audio: AudioChunk
    sentence_done: SentenceDone
    error: SynthesisError
    def __init__(self, sentence_started: _Optional[_Union[SentenceStarted, _Mapping]] = ..., audio: _Optional[_Union[AudioChunk, _Mapping]] = ..., sentence_done: _Optional[_Union[SentenceDone, _Mapping]] = ..., error: _Optional[_Union[SynthesisError, _Mapping]] = ...) -> None: ...
