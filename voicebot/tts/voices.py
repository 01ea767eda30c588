"""Which voice speaks which language: the default piper voice, and ``TTS_VOICES``.

A stream's language (its config's ``language``, e.g. ``ko`` or ``ko-KR``) picks the engine:
the language's own voice when ``TTS_VOICES`` (or the defaults below) gives it one, else the
default voice (``TTS_VOICE_PATH``, else the packaged English piper voice). ``TTS_VOICES`` is a
comma-separated list of ``LANGUAGE=KIND:VOICE``:

- ``ko=espeak:ko``: espeak-ng's voice ``ko`` (a separate program, ``voicebot/tts/espeak.py``);
- ``ko=piper:/voices/ko.onnx``: a piper voice, its config beside it (``ko.onnx.json``);
- ``ko=default``: the default voice after all.

Without an entry of its own, Korean is spoken by espeak-ng's Korean when ``espeak-ng`` is on the
PATH: a weak voice, but Korean, where the English voice would read Korean text as noise. An
entry for the language replaces that, so a better voice is a setting, not a code change.
"""

from __future__ import annotations

import logging
import re
import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from voicebot.tts.config import TtsSettings
from voicebot.tts.engine import PiperEngine, TtsEngine, default_threads, packaged_voice
from voicebot.tts.espeak import EspeakEngine, EspeakError

log = logging.getLogger("tts")
KINDS = ("espeak", "piper", "default")
_LANGUAGE = re.compile(r"[a-z]{2,3}(?:-[a-z0-9]{1,8})*")
EXAMPLE = "'ko=espeak:ko' or 'ko=piper:/voices/ko.onnx'"
# No packaged piper voice speaks these: espeak-ng's voice does, when it is installed.
ESPEAK_DEFAULTS = {"ko": "ko"}


class VoicesError(ValueError):
    """TTS_VOICES cannot be used as it is; the message names the setting and the entry."""


@dataclass(frozen=True)
class VoiceSpec:
    kind: str  # one of KINDS
    voice: str = ""  # espeak: the voice's name; piper: the .onnx path; default: empty

    def __str__(self) -> str:
        return f"{self.kind}:{self.voice}" if self.voice else self.kind


def parse_voices(value: str) -> dict[str, VoiceSpec]:
    """``TTS_VOICES`` as {language: voice}; VoicesError naming the entry that is wrong."""
    voices: dict[str, VoiceSpec] = {}
    for entry in (part.strip() for part in value.split(",")):
        if not entry:
            continue
        language, equals, spec = (part.strip() for part in entry.partition("="))
        language = language.lower().replace("_", "-")
        if not equals or not _LANGUAGE.fullmatch(language):
            raise VoicesError(f"TTS_VOICES: {entry!r} is not LANGUAGE=KIND:VOICE (e.g. {EXAMPLE})")
        if language in voices:
            raise VoicesError(f"TTS_VOICES: {language!r} is given two voices")
        kind, _colon, voice = (part.strip() for part in spec.partition(":"))
        if kind not in KINDS:
            raise VoicesError(f"TTS_VOICES: {entry!r}: unknown kind {kind!r}; "
                              f"use espeak:VOICE, piper:PATH.onnx or default")
        if (kind == "default") == bool(voice):
            need = "takes no voice" if kind == "default" else "needs a voice after the colon"
            raise VoicesError(f"TTS_VOICES: {entry!r}: {kind} {need} (e.g. {EXAMPLE})")
        voices[language] = VoiceSpec(kind, voice)
    return voices


def default_voices() -> dict[str, VoiceSpec]:
    """The languages that have a voice without TTS_VOICES: Korean, when espeak-ng is installed."""
    if not shutil.which("espeak-ng"):
        return {}
    return {language: VoiceSpec("espeak", voice) for language, voice in ESPEAK_DEFAULTS.items()}


class Voices:
    """The default engine and the languages with one of their own."""

    def __init__(self, default: TtsEngine, by_language: Mapping[str, TtsEngine] | None = None) -> None:
        self.default = default
        self.by_language = dict(by_language or {})

    def for_language(self, language: str) -> TtsEngine:
        """``ko-KR`` finds ``ko-kr``, then ``ko``; a language without a voice gets the default."""
        code = (language or "").lower().replace("_", "-")
        while code:
            if code in self.by_language:
                return self.by_language[code]
            code = code.rpartition("-")[0]
        return self.default

    def engines(self) -> list[TtsEngine]:
        """Each engine once (to warm them)."""
        return list({id(engine): engine for engine in [self.default, *self.by_language.values()]}.values())


def build_voices(settings: TtsSettings) -> Voices:
    """Every engine the settings name, loaded now: a voice that cannot speak fails the start."""
    asked = parse_voices(settings.voices)  # a malformed setting fails before any model loads
    threads = settings.threads or default_threads(settings.workers)

    def piper(model: Path, config: Path | None) -> PiperEngine:
        return PiperEngine(model, config, threads, settings.min_phrase_phonemes)

    if settings.voice_path:
        config = Path(settings.voice_config_path).expanduser() if settings.voice_config_path else None
        default = piper(Path(settings.voice_path).expanduser(), config)
    else:
        default = piper(*packaged_voice())
    loaded: dict[VoiceSpec, TtsEngine] = {VoiceSpec("default"): default}
    by_language: dict[str, TtsEngine] = {}
    for language, spec in {**default_voices(), **asked}.items():
        try:
            by_language[language] = loaded.get(spec) or load(spec, piper, settings)
        except (VoicesError, EspeakError) as exc:
            if language in asked:
                raise VoicesError(f"TTS_VOICES: {language}={spec}: {exc}") from None
            log.warning("no voice of its own for this language; the default voice speaks it",
                        extra={"language": language, "voice": str(spec), "error": str(exc)})
            continue
        loaded[spec] = by_language[language]
        log.info("a voice of its own", extra={"language": language, "voice": str(spec)})
    return Voices(default, by_language)


def load(spec: VoiceSpec, piper: Callable[[Path, Path | None], PiperEngine],
         settings: TtsSettings) -> TtsEngine:
    if spec.kind == "espeak":
        # A Hangul syllable is two or three phonemes: half of piper's count in characters.
        return EspeakEngine(spec.voice, settings.min_phrase_phonemes // 2)
    model = Path(spec.voice).expanduser()
    config = Path(f"{model}.json")
    for path in (model, config):
        if not path.is_file():
            raise VoicesError(f"{path} does not exist "
                              "(a piper voice is VOICE.onnx with VOICE.onnx.json beside it)")
    return piper(model, config)
