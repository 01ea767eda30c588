"""The espeak-ng engine: a voice for languages no packaged piper voice speaks (Korean).

espeak-ng is a formant synthesizer: intelligible, robotic, and far weaker than a neural voice,
but it speaks a hundred languages from a Debian package. It runs as a separate program (one
``espeak-ng`` process per phrase, text on its stdin, WAV on its stdout), never linked: its
GPL-3.0 stays with the program, like piper's stays in this service.

A render costs a few milliseconds per second of speech, so phrases matter less than for piper;
a sentence is still cut at its pauses (the same rule as piper's, counted in characters), so
its first audio never waits for a long sentence and a stop lands between short renders.
"""

from __future__ import annotations

import re
import shutil
import struct
import subprocess

import numpy as np

from voicebot.tts.engine import Phrase, RenderStop, RenderStopped, TtsEngine, split_phonemes

# espeak-ng's own output rate (its voices are made for it).
ESPEAK_RATE = 22050
# A sentence's end inside the text it is given: cut there first, then at the pauses.
_SENTENCE_END = re.compile(r"(?<=[.!?。！？…])\s+")
# A comma in the writing systems espeak-ng reads: the pause marks split_phonemes cuts after.
_WIDE_PAUSES = str.maketrans({"，": ",", "、": ",", "；": ";", "：": ":"})
# The shortest first piece of a reply's first sentence, in characters ("네," is two).
FIRST_PHRASE_MIN_CHARS = 2
# A phrase that takes longer than this is a stuck process, not speech.
RENDER_TIMEOUT_S = 30.0


class EspeakError(ValueError):
    """espeak-ng is missing, or the voice it was asked for does not exist."""


class EspeakEngine(TtsEngine):
    sample_rate = ESPEAK_RATE

    def __init__(self, voice: str, min_phrase_chars: int = 12, speed: int = 0,
                 program: str = "espeak-ng") -> None:
        """``voice``: an espeak-ng voice (``espeak-ng --voices`` lists them: ``ko``, ``en-us``).
        ``min_phrase_chars``: cut a sentence at a pause only between pieces this long (0: whole
        sentences). ``speed``: words per minute, 0 for the voice's own."""
        binary = shutil.which(program)
        if binary is None:
            raise EspeakError(f"{program} is not installed (Debian: apt-get install espeak-ng)")
        self._command = [binary, "-v", voice, "-b", "1", "--stdout", "--stdin"]
        if speed:
            self._command[1:1] = ["-s", str(speed)]
        self.voice = voice
        self.min_phrase_chars = min_phrase_chars
        # A wrong voice name fails here, at the service's start, not on a caller's first turn.
        if not len(self.render("1")):
            raise EspeakError(f"espeak-ng voice {voice!r} produced no audio")

    def split(self, text: str, urgent: bool = False) -> list[Phrase]:
        phrases: list[Phrase] = []
        sentences = [s for s in _SENTENCE_END.split(" ".join(text.split())) if s]
        for number, sentence in enumerate(sentences):
            first_min = FIRST_PHRASE_MIN_CHARS if urgent and number == 0 else None
            # Pieces of the original text: only the pause marks are read in their ASCII form.
            pieces = split_phonemes(list(sentence.translate(_WIDE_PAUSES)), self.min_phrase_chars, first_min)
            start = 0
            for piece in pieces:
                phrases.append(sentence[start:start + len(piece)].strip())
                start += len(piece)
        return [phrase for phrase in phrases if phrase]

    def render(self, phrase: Phrase, stop: RenderStop | None = None) -> np.ndarray:
        text = phrase if isinstance(phrase, str) else "".join(phrase)
        if stop is not None and stop.is_set():
            raise RenderStopped("stopped before the render")
        process = subprocess.Popen(self._command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE)
        unregister = stop.on_set(process.kill) if stop is not None else (lambda: None)
        try:
            wav, errors = process.communicate(text.encode("utf-8"), timeout=RENDER_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.communicate()
            raise RuntimeError(f"espeak-ng took over {RENDER_TIMEOUT_S:.0f} s for one phrase") from None
        finally:
            unregister()
        if stop is not None and stop.is_set() and process.returncode != 0:
            raise RenderStopped("stopped during the render")
        if process.returncode != 0:
            detail = errors.decode("utf-8", "replace").strip() or f"exit status {process.returncode}"
            raise EspeakError(f"espeak-ng -v {self.voice}: {detail}")
        return wav_samples(wav)


def wav_samples(wav: bytes) -> np.ndarray:
    """float32 samples of espeak-ng's ``--stdout`` WAV: mono PCM16 at ESPEAK_RATE.

    Written as a stream, its RIFF and data sizes are placeholders (0x7ffff000), which the
    ``wave`` module takes at their word: the data runs to the end of what was written.
    """
    if wav[:4] != b"RIFF" or wav[8:12] != b"WAVE":
        raise EspeakError("espeak-ng did not write a WAV")
    position = 12
    while position + 8 <= len(wav):
        kind, size = wav[position:position + 4], struct.unpack_from("<I", wav, position + 4)[0]
        body = position + 8
        if kind == b"fmt ":
            _format, channels, rate, _bytes_per_s, _align, bits = struct.unpack_from("<HHIIHH", wav, body)
            if (channels, rate, bits) != (1, ESPEAK_RATE, 16):
                raise EspeakError(f"espeak-ng wrote {channels} channel(s) of {bits} bit at {rate} Hz")
        elif kind == b"data":
            data = wav[body:]
            data = data[:len(data) - len(data) % 2]
            return np.frombuffer(data, "<i2").astype(np.float32) / 32768.0
        position = body + size + size % 2
    raise EspeakError("espeak-ng's WAV has no audio")
