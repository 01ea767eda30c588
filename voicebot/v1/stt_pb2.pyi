from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class RecognitionConfig(_message.Message):
    __slots__ = ("session_id", "turn_id", "language", "sample_rate", "interim_results", "endpoint_silence_ms", "encoding", "speculative_results", "final_with_end_of_utterance")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    TURN_ID_FIELD_NUMBER: _ClassVar[int]
    LANGUAGE_FIELD_NUMBER: _ClassVar[int]
    SAMPLE_RATE_FIELD_NUMBER: _ClassVar[int]
    INTERIM_RESULTS_FIELD_NUMBER: _ClassVar[int]
    ENDPOINT_SILENCE_MS_FIELD_NUMBER: _ClassVar[int]
    ENCODING_FIELD_NUMBER: _ClassVar[int]
    SPECULATIVE_RESULTS_FIELD_NUMBER: _ClassVar[int]
    FINAL_WITH_END_OF_UTTERANCE_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    turn_id: str
    language: str
    sample_rate: int
    interim_results: bool
    endpoint_silence_ms: int
    encoding: str
    speculative_results: bool
    final_with_end_of_utterance: bool
    def __init__(self, session_id: _Optional[str] = ..., turn_id: _Optional[str] = ..., language: _Optional[str] = ..., sample_rate: _Optional[int] = ..., interim_results: _Optional[bool] = ..., endpoint_silence_ms: _Optional[int] = ..., encoding: _Optional[str] = ..., speculative_results: _Optional[bool] = ..., final_with_end_of_utterance: _Optional[bool] = ...) -> None: ...

class UtteranceContext(_message.Message):
    __slots__ = ("utterance_index", "turn_id", "traceparent")
    UTTERANCE_INDEX_FIELD_NUMBER: _ClassVar[int]
    TURN_ID_FIELD_NUMBER: _ClassVar[int]
    TRACEPARENT_FIELD_NUMBER: _ClassVar[int]
    utterance_index: int
    turn_id: str
    traceparent: str
    def __init__(self, utterance_index: _Optional[int] = ..., turn_id: _Optional[str] = ..., traceparent: _Optional[str] = ...) -> None: ...

class RecognizeRequest(_message.Message):
    __slots__ = ("config", "audio", "utterance")
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    AUDIO_FIELD_NUMBER: _ClassVar[int]
    UTTERANCE_FIELD_NUMBER: _ClassVar[int]
    config: RecognitionConfig
    audio: bytes
    utterance: UtteranceContext
    def __init__(self, config: _Optional[_Union[RecognitionConfig, _Mapping]] = ..., audio: _Optional[bytes] = ..., utterance: _Optional[_Union[UtteranceContext, _Mapping]] = ...) -> None: ...

class SpeechStarted(_message.Message):
    __slots__ = ("offset_ms",)
    OFFSET_MS_FIELD_NUMBER: _ClassVar[int]
    offset_ms: int
    def __init__(self, offset_ms: _Optional[int] = ...) -> None: ...

class Transcript(_message.Message):
    __slots__ = ("text", "is_final", "start_ms", "end_ms", "language", "speculative")
    TEXT_FIELD_NUMBER: _ClassVar[int]
    IS_FINAL_FIELD_NUMBER: _ClassVar[int]
    START_MS_FIELD_NUMBER: _ClassVar[int]
    END_MS_FIELD_NUMBER: _ClassVar[int]
    LANGUAGE_FIELD_NUMBER: _ClassVar[int]
    SPECULATIVE_FIELD_NUMBER: _ClassVar[int]
    text: str
    is_final: bool
    start_ms: int
    end_ms: int
    language: str
    speculative: bool
    def __init__(self, text: _Optional[str] = ..., is_final: _Optional[bool] = ..., start_ms: _Optional[int] = ..., end_ms: _Optional[int] = ..., language: _Optional[str] = ..., speculative: _Optional[bool] = ...) -> None: ...

class EndOfUtterance(_message.Message):
    __slots__ = ("end_ms", "reason", "final")
    END_MS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    FINAL_FIELD_NUMBER: _ClassVar[int]
    end_ms: int
    reason: str
    final: Transcript
    def __init__(self, end_ms: _Optional[int] = ..., reason: _Optional[str] = ..., final: _Optional[_Union[Transcript, _Mapping]] = ...) -> None: ...

class RecognizeEvent(_message.Message):
    __slots__ = ("session_id", "utterance_index", "speech_started", "transcript", "end_of_utterance")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    UTTERANCE_INDEX_FIELD_NUMBER: _ClassVar[int]
    SPEECH_STARTED_FIELD_NUMBER: _ClassVar[int]
    TRANSCRIPT_FIELD_NUMBER: _ClassVar[int]
    END_OF_UTTERANCE_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    utterance_index: int
    speech_started: SpeechStarted
    transcript: Transcript
    end_of_utterance: EndOfUtterance
    def __init__(self, session_id: _Optional[str] = ..., utterance_index: _Optional[int] = ..., speech_started: _Optional[_Union[SpeechStarted, _Mapping]] = ..., transcript: _Optional[_Union[Transcript, _Mapping]] = ..., end_of_utterance: _Optional[_Union[EndOfUtterance, _Mapping]] = ...) -> None: ...
