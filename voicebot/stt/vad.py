"""Silero VAD (the ONNX model that ships in faster-whisper), run frame by frame.

One ONNX session is shared by every stream (``InferenceSession.run`` is
thread-safe); each stream keeps its own recurrent state and the 64-sample
context that the model expects in front of every 512-sample frame.
A frame takes about 0.1 ms, so it runs inline on the event loop: handing
it to a thread would cost more than the work.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

FRAME_SAMPLES = 512  # 32 ms at 16 kHz
CONTEXT_SAMPLES = 64
SAMPLE_RATE = 16000
FRAME_MS = FRAME_SAMPLES * 1000 // SAMPLE_RATE


class SileroVad:
    """The shared model."""

    def __init__(self, path: Path) -> None:
        import onnxruntime

        opts = onnxruntime.SessionOptions()
        opts.inter_op_num_threads = 1
        opts.intra_op_num_threads = 1
        opts.log_severity_level = 4
        self._session = onnxruntime.InferenceSession(
            str(path), providers=["CPUExecutionProvider"], sess_options=opts
        )

    def new_stream(self) -> VadStream:
        return VadStream(self)

    def run(self, window: np.ndarray, h: np.ndarray, c: np.ndarray):
        return self._session.run(None, {"input": window, "h": h, "c": c})


class VadStream:
    """Per-stream state: recurrent h/c and the previous frame's tail."""

    def __init__(self, model: SileroVad) -> None:
        self._model = model
        self._h = np.zeros((1, 1, 128), dtype=np.float32)
        self._c = np.zeros((1, 1, 128), dtype=np.float32)
        self._context = np.zeros(CONTEXT_SAMPLES, dtype=np.float32)

    def probability(self, frame: np.ndarray) -> float:
        """Speech probability of one 512-sample frame at 16 kHz."""
        window = np.concatenate([self._context, frame]).reshape(1, -1).astype(np.float32)
        probs, self._h, self._c = self._model.run(window, self._h, self._c)
        self._context = frame[-CONTEXT_SAMPLES:]
        return float(probs[0])
