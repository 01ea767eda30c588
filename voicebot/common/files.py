"""Small file helpers shared by the services (model checks)."""

from __future__ import annotations

import hashlib
from pathlib import Path


def sha256_of(path: Path, chunk: int = 1 << 22) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(chunk):
            digest.update(block)
    return digest.hexdigest()
