"""G.711 μ-law and A-law with numpy tables (``audioop`` is gone from Python 3.13).

Decoding is a 256-entry table; encoding a 65,536-entry table indexed by the PCM16 sample
itself, both built once from the ITU-T G.711 definitions.
"""

from __future__ import annotations

import numpy as np

_BIAS, _CLIP = 0x84, 32635


def _ulaw_decode_table() -> np.ndarray:
    codes = ~np.arange(256, dtype=np.int32) & 0xFF
    exponent, mantissa = (codes >> 4) & 0x07, codes & 0x0F
    magnitude = (((mantissa << 3) + _BIAS) << exponent) - _BIAS
    return np.where(codes & 0x80, -magnitude, magnitude).astype(np.int16)


def _alaw_decode_table() -> np.ndarray:
    codes = np.arange(256, dtype=np.int32) ^ 0x55
    exponent, mantissa = (codes >> 4) & 0x07, codes & 0x0F
    magnitude = np.where(exponent == 0, (mantissa << 4) + 8, ((mantissa << 4) + 0x108) << (exponent - 1))
    return np.where(codes & 0x80, magnitude, -magnitude).astype(np.int16)


def _ulaw_encode_table() -> np.ndarray:
    pcm = np.arange(-32768, 32768, dtype=np.int32)
    sign = np.where(pcm < 0, 0x80, 0)
    magnitude = np.minimum(np.abs(pcm), _CLIP) + _BIAS
    exponent = np.floor(np.log2(magnitude)).astype(np.int32) - 7
    mantissa = (magnitude >> (exponent + 3)) & 0x0F
    return (~(sign | (exponent << 4) | mantissa) & 0xFF).astype(np.uint8)


def _alaw_encode_table() -> np.ndarray:
    pcm = np.arange(-32768, 32768, dtype=np.int32)
    sign = np.where(pcm >= 0, 0x80, 0)
    magnitude = np.minimum(np.where(pcm < 0, -pcm - 1, pcm), 32767) >> 3
    exponent = np.maximum(0, np.floor(np.log2(np.maximum(magnitude, 1))).astype(np.int32) - 4)
    mantissa = np.where(exponent == 0, magnitude >> 1, magnitude >> exponent) & 0x0F
    return ((sign | (exponent << 4) | mantissa) ^ 0x55).astype(np.uint8)


ULAW_DECODE, ALAW_DECODE = _ulaw_decode_table(), _alaw_decode_table()
ULAW_ENCODE, ALAW_ENCODE = _ulaw_encode_table(), _alaw_encode_table()


def ulaw_to_pcm16(data: bytes) -> bytes:
    return ULAW_DECODE[np.frombuffer(data, dtype=np.uint8)].tobytes()


def pcm16_to_ulaw(pcm: bytes) -> bytes:
    return ULAW_ENCODE[np.frombuffer(pcm, dtype="<i2").astype(np.int32) + 32768].tobytes()


def alaw_to_pcm16(data: bytes) -> bytes:
    return ALAW_DECODE[np.frombuffer(data, dtype=np.uint8)].tobytes()


def pcm16_to_alaw(pcm: bytes) -> bytes:
    return ALAW_ENCODE[np.frombuffer(pcm, dtype="<i2").astype(np.int32) + 32768].tobytes()
