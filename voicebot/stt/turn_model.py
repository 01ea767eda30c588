"""The end-of-turn model: Smart Turn v3 (an audio classifier, ONNX), run at each short pause.

At a pause the stream hands the utterance so far to ``TurnScorer.score``: the last 8 s of it,
ending a fixed tail of silence after the last speech (``STT_TURN_MODEL_TAIL_MS``), however long
the pause has lasted when it is asked; the model says how likely the caller has finished. The
tail is fixed because the model's score rises with the silence it hears, on a sentence cut at a
thinking pause as on a finished one (``make bench-turn-scores``). The model runs on threads of
its own fed by a bounded queue: a pause that finds the queue full is judged without it. The ONNX file is
package data of the ``pipecat-ai`` wheel, installed ``--no-deps`` and found on disk through
the package's file list: pipecat itself is never imported. Its sha256 is pinned, so a
corrupt or substituted file fails the start with the path named (or, when the service is
configured to tolerate it, streams keep the silence timer).

The input is what Smart Turn was trained on: Whisper log-mel features (80 bins, 10 ms hop)
of 8 s of 16 kHz audio, left-padded with zeros, the waveform normalised to zero mean and
unit variance first (``transformers.WhisperFeatureExtractor(chunk_length=8)`` with
``do_normalize=True``), written here with NumPy.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.metadata
import logging
import queue
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from voicebot.common.files import sha256_of
from voicebot.stt.metrics import TURN_MODEL_BUSY_TOTAL, TURN_MODEL_SECONDS, TURN_MODEL_WAIT_SECONDS

log = logging.getLogger("stt")

SMART_TURN_PACKAGE = "pipecat-ai"
SMART_TURN_FILE = "pipecat/audio/turn/smart_turn/data/smart-turn-v3.2-cpu.onnx"
SMART_TURN_SHA256 = "2bb026316b14a660486a75b1733cd3fbab8c2fd0314dc9af7be49f8cca967e4f"
# The 23 languages Smart Turn v3 was trained on (ISO 639-1, as Whisper names them).
SMART_TURN_LANGUAGES = ("ar", "bn", "zh", "da", "nl", "de", "en", "fi", "fr", "hi", "id", "it", "ja",
                        "ko", "mr", "no", "pl", "pt", "ru", "es", "tr", "uk", "vi")

RATE = 16000
WINDOW_SAMPLES = 8 * RATE
N_FFT, HOP, N_MELS = 400, 160, 80


class TurnModelError(RuntimeError):
    """The model file is missing, corrupt or not a Smart Turn model (the message names the path)."""


class TurnModelBusy(RuntimeError):
    """Every place in the model's queue is taken: this pause is judged without it."""


def packaged_model_path() -> Path:
    """The ONNX file inside the installed pipecat-ai wheel, located without importing pipecat."""
    try:
        dist = importlib.metadata.distribution(SMART_TURN_PACKAGE)
    except importlib.metadata.PackageNotFoundError:
        raise TurnModelError(
            f"the end-of-turn model's package '{SMART_TURN_PACKAGE}' is not installed; run `make setup` "
            f"(it is installed with pip --no-deps), set STT_TURN_MODEL_PATH, or STT_TURN_MODEL=off"
        ) from None
    for file in dist.files or []:
        if str(file).replace("\\", "/") == SMART_TURN_FILE:
            return Path(str(dist.locate_file(file)))
    raise TurnModelError(f"{SMART_TURN_PACKAGE} {dist.version} holds no {SMART_TURN_FILE}")


# ---- features --------------------------------------------------------------
def _slaney_mel(hz: np.ndarray) -> np.ndarray:
    hz = np.asarray(hz, dtype=np.float64)
    log_region = hz >= 1000.0
    mel = 3.0 * hz / 200.0
    return np.where(log_region, 15.0 + np.log(np.maximum(hz, 1e-9) / 1000.0) * 27.0 / np.log(6.4), mel)


def _slaney_hz(mel: np.ndarray) -> np.ndarray:
    mel = np.asarray(mel, dtype=np.float64)
    return np.where(mel >= 15.0, 1000.0 * np.exp(np.log(6.4) / 27.0 * (mel - 15.0)), 200.0 * mel / 3.0)


def mel_filters() -> np.ndarray:
    """Slaney-normalised triangular filters, (N_MELS, N_FFT // 2 + 1), as Whisper's (librosa's)."""
    edges = _slaney_hz(np.linspace(_slaney_mel(0.0), _slaney_mel(RATE / 2), N_MELS + 2))
    bins = np.linspace(0, RATE / 2, N_FFT // 2 + 1)
    slopes = edges[None, :] - bins[:, None]
    widths = np.diff(edges)
    down = -slopes[:, :-2] / widths[:-1]
    up = slopes[:, 2:] / widths[1:]
    filters = np.maximum(0.0, np.minimum(down, up)) * (2.0 / (edges[2:] - edges[:-2]))[None, :]
    return filters.T


_FILTERS = mel_filters()
_WINDOW = np.hanning(N_FFT + 1)[:-1]  # periodic Hann, as torch.hann_window


def window(audio: np.ndarray) -> np.ndarray:
    """The last 8 s of ``audio``, zeros in front when it is shorter."""
    audio = np.asarray(audio, dtype=np.float32)[-WINDOW_SAMPLES:]
    return np.pad(audio, (WINDOW_SAMPLES - len(audio), 0))


def log_mel(audio: np.ndarray) -> np.ndarray:
    """Smart Turn's input features (80, 800) for 16 kHz float audio (the last 8 s of it)."""
    x = window(audio)
    # Normalising the whole window, padding included, is what the model saw in training.
    x = (x - x.mean()) / np.sqrt(x.var() + 1e-7)
    padded = np.pad(x.astype(np.float64), (N_FFT // 2, N_FFT // 2), mode="reflect")
    frames = np.lib.stride_tricks.sliding_window_view(padded, N_FFT)[::HOP]
    power = np.abs(np.fft.rfft(frames * _WINDOW, axis=-1)) ** 2
    mel = np.log10(np.maximum(_FILTERS @ power.T, 1e-10))[:, :-1]
    mel = np.maximum(mel, mel.max() - 8.0)
    return ((mel + 4.0) / 4.0).astype(np.float32)


# ---- the model -------------------------------------------------------------
class SmartTurnModel:
    """One ONNX session shared by every stream (``InferenceSession.run`` is thread-safe)."""

    def __init__(self, path: Path, sha256: str = SMART_TURN_SHA256, threads: int = 1) -> None:
        import onnxruntime

        if not path.is_file():
            raise TurnModelError(f"end-of-turn model {path} does not exist")
        if sha256 and (digest := sha256_of(path)) != sha256:
            raise TurnModelError(f"end-of-turn model {path} has sha256 {digest}, expected {sha256} (a "
                                 "corrupt or different file; STT_TURN_MODEL_SHA256 names the one to accept)")
        opts = onnxruntime.SessionOptions()
        opts.inter_op_num_threads = 1
        opts.intra_op_num_threads = threads
        opts.log_severity_level = 4
        try:
            self._session = onnxruntime.InferenceSession(str(path), sess_options=opts,
                                                         providers=["CPUExecutionProvider"])
        except Exception as exc:  # noqa: BLE001 - onnxruntime raises its own types for a bad file
            raise TurnModelError(f"end-of-turn model {path} could not be loaded: {exc}") from None
        inputs = self._session.get_inputs()
        if [i.name for i in inputs] != ["input_features"] or list(inputs[0].shape[1:]) != [N_MELS, 800]:
            raise TurnModelError(f"end-of-turn model {path} is not a Smart Turn v3 model "
                                 f"(inputs {[(i.name, i.shape) for i in inputs]})")
        self.path = path

    def probability(self, audio: np.ndarray) -> float:
        """How likely the speaker has finished, for 16 kHz audio ending now (blocking)."""
        features = log_mel(audio)[None]
        return float(np.asarray(self._session.run(None, {"input_features": features})[0]).reshape(-1)[0])


@dataclass(frozen=True)
class Verdict:
    probability: float
    seconds: float  # features and inference
    waited: float  # queued behind other streams' inferences
    finished: bool = False  # the decision, the pause's words included
    words_unfinished: bool = False  # the decode at the pause read as speech that goes on
    words_finished: bool = False  # the decode at the pause read as a finished sentence
    model_busy: bool = False  # the model's queue was full: the words and the limits judged it


@dataclass
class _Job:
    audio: np.ndarray
    queued: float
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future
    abandoned: bool = field(default=False)  # the pause is moot (speech came back): skip it


class TurnScorer:
    """Runs the model on threads of its own (one core each), fed by a bounded queue, off the event
    loop: audio frames never wait for it, and a burst of pauses beyond the queue is judged by the
    words and the limits instead of waiting behind other streams' pauses."""

    def __init__(self, model: SmartTurnModel, workers: int = 1, queue_size: int = 4) -> None:
        self.model = model
        # Room for one stop sign per thread at shutdown, whatever the size.
        self._queue: queue.Queue[_Job | None] = queue.Queue(maxsize=max(1, queue_size, workers))
        self._threads = [threading.Thread(target=self._serve, name=f"stt-turn-{i}", daemon=True)
                         for i in range(max(1, workers))]
        for thread in self._threads:
            thread.start()

    async def score(self, audio: np.ndarray) -> Verdict:
        """The model's verdict on ``audio``; ``TurnModelBusy`` when the queue is full."""
        loop = asyncio.get_running_loop()
        job = _Job(audio, time.perf_counter(), loop, loop.create_future())
        try:
            self._queue.put_nowait(job)
        except queue.Full:
            TURN_MODEL_BUSY_TOTAL.inc()
            raise TurnModelBusy("the end-of-turn model's queue is full") from None
        try:
            return await job.future
        finally:
            job.abandoned = True  # cancelled: a thread that has not started it skips it

    def _serve(self) -> None:
        while (job := self._queue.get()) is not None:
            if job.abandoned:
                continue
            started = time.perf_counter()
            try:
                probability = self.model.probability(job.audio)
            except Exception as exc:  # noqa: BLE001 - handed to the awaiting stream
                job.loop.call_soon_threadsafe(_settle, job.future, exc)
                continue
            seconds, waited = time.perf_counter() - started, started - job.queued
            TURN_MODEL_SECONDS.observe(seconds)
            TURN_MODEL_WAIT_SECONDS.observe(waited)
            job.loop.call_soon_threadsafe(_settle, job.future, Verdict(probability, seconds, waited))

    def shutdown(self) -> None:
        """Stop the threads: queued pauses are dropped, a running one finishes."""
        with contextlib.suppress(queue.Empty):
            while True:
                self._queue.get_nowait()
        for _ in self._threads:
            with contextlib.suppress(queue.Full):
                self._queue.put_nowait(None)


def _settle(future: asyncio.Future, outcome: Verdict | BaseException) -> None:
    if future.done():
        return
    if isinstance(outcome, BaseException):
        future.set_exception(outcome)
    else:
        future.set_result(outcome)


def load_turn_scorer(kind: str, path: str, sha256: str, workers: int, required: bool,
                     queue_size: int = 4) -> TurnScorer | None:
    """The configured model, or None for the silence timer (``off``, or a failure tolerated)."""
    if kind in ("off", "text"):
        return None
    if kind != "smart-turn":
        raise TurnModelError(f"STT_TURN_MODEL={kind!r} is none of 'smart-turn', 'text', 'off'")
    try:
        model_path = Path(path).expanduser() if path else packaged_model_path()
        return TurnScorer(SmartTurnModel(model_path, sha256), workers, queue_size)
    except TurnModelError as exc:
        if required:
            raise
        log.warning("end-of-turn model unavailable; every stream uses the silence timer "
                    "(STT_TURN_MODEL_REQUIRED=false)", extra={"error": str(exc)})
        return None
