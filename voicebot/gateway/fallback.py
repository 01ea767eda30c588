"""Fallback sentences the caller hears when STT, the brain or TTS fails, even with TTS down.

Each sentence is synthesized through TTS once per language (at start for the default language,
at a session's start for its language; retried with backoff until TTS answers) and kept as PCM
at the gateway's output rate, so it plays when TTS itself is the part that failed.

When TTS was never reachable since the gateway started there is no speech to play: the caller
hears a short falling two-note chime, generated here, alongside the ``error`` event (which the
browser page prints). A chime rather than a recording shipped with the gateway: no build step
that runs piper (GPL-3.0, kept inside voicebot/tts/), no binary asset that can drift from the
configured voice, and it needs no language.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

import grpc
import numpy as np

from voicebot.common.audio import float_to_pcm16, pcm16_to_float, resample
from voicebot.v1 import tts_pb2

log = logging.getLogger("voicebot.gateway.fallback")

# kind -> sentence, per language; a language without its own sentences uses English.
SENTENCES: dict[str, dict[str, str]] = {
    "en": {
        "unavailable": "Sorry, something went wrong on my side. Please say that again in a moment.",
        "cant_hear": "Sorry, I can't hear you right now. Please try again in a moment.",
        "busy": "Sorry, I'm very busy right now. Please call again in a minute.",
    },
}
RETRY_FIRST_S, RETRY_MAX_S = 1.0, 30.0


def chime(sample_rate: int) -> bytes:
    """Two soft falling notes (~0.4 s): heard as "that did not work", in any language."""
    def note(freq: float, ms: int) -> np.ndarray:
        t = np.arange(sample_rate * ms // 1000) / sample_rate
        envelope = np.minimum(1.0, np.minimum(t, t[-1] - t) / 0.015)  # 15 ms fades: no clicks
        return 0.2 * envelope * np.sin(2 * np.pi * freq * t)

    gap = np.zeros(sample_rate * 80 // 1000)
    return float_to_pcm16(np.concatenate([note(660, 150), gap, note(440, 200)]).astype(np.float32))


def sentences_for(language: str) -> tuple[str, dict[str, str]]:
    return (language, SENTENCES[language]) if language in SENTENCES else ("en", SENTENCES["en"])


class FallbackVoice:
    def __init__(self, tts_stub, sample_rate: int, timeout_s: float = 10.0) -> None:
        self._tts, self.sample_rate, self.timeout_s = tts_stub, sample_rate, timeout_s
        self._cache: dict[tuple[str, str], bytes] = {}
        self._warming: dict[str, asyncio.Task] = {}
        self._chime = chime(sample_rate)

    def warm(self, language: str) -> None:
        """Synthesize the language's sentences in the background (once; retried until TTS answers)."""
        language, _ = sentences_for(language)
        if language not in self._warming:
            self._warming[language] = asyncio.create_task(self._warm(language))

    def audio(self, kind: str, language: str, rate: int | None = None) -> tuple[bytes, str]:
        """The sentence's PCM (at ``rate``, else the gateway's) and its source: ("tts" cached
        speech | "tone")."""
        language, _ = sentences_for(language)
        pcm = self._cache.get((language, kind))
        pcm, source = (pcm, "tts") if pcm else (self._chime, "tone")
        if rate is not None and rate != self.sample_rate:  # prepared at the gateway's rate
            pcm = float_to_pcm16(resample(pcm16_to_float(pcm), self.sample_rate, rate))
        return pcm, source

    async def close(self) -> None:
        for task in self._warming.values():
            task.cancel()
        for task in self._warming.values():
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _warm(self, language: str) -> None:
        _, texts = sentences_for(language)
        delay = RETRY_FIRST_S
        while True:
            try:
                for kind, text in texts.items():
                    if (language, kind) not in self._cache:
                        self._cache[(language, kind)] = await self._synthesize(language, text)
                log.info("fallback sentences ready", extra={"language": language})
                return
            except (grpc.aio.AioRpcError, ValueError) as exc:
                log.warning("fallback sentences not synthesized yet; retrying",
                            extra={"language": language, "detail": str(exc)[:200], "retry_s": delay})
            await asyncio.sleep(delay)
            delay = min(RETRY_MAX_S, delay * 2)

    async def _synthesize(self, language: str, text: str) -> bytes:
        async def requests():
            yield tts_pb2.SynthesizeRequest(config=tts_pb2.SynthesisConfig(
                session_id="fallback", turn_id="fallback", sample_rate=self.sample_rate, language=language))
            yield tts_pb2.SynthesizeRequest(text=text)

        pcm = bytearray()
        async for event in self._tts.StreamingSynthesize(requests(), timeout=self.timeout_s):
            if event.WhichOneof("event") == "audio":
                pcm += event.audio.pcm16
            elif event.WhichOneof("event") == "error":
                raise ValueError(event.error.message)
        if not pcm:
            raise ValueError("TTS returned no audio")
        return bytes(pcm)
