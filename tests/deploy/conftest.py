from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.deploy.support import K8S, OVERLAYS, Rendered, kustomize, load_all


def _render(name: str, path: Path) -> Rendered:
    text = kustomize(path)
    return Rendered(name, text, load_all(text))


@pytest.fixture(scope="session")
def rendered(tmp_path_factory) -> dict[str, Rendered]:
    """Every overlay rendered once with `kubectl kustomize`, plus cpu + the monitoring component."""
    result = {name: _render(name, path) for name, path in OVERLAYS.items()}
    combo = tmp_path_factory.mktemp("cpu-monitoring")
    (combo / "kustomization.yaml").write_text(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nnamespace: voicebot\n"
        f"resources: [{os.path.relpath(K8S / 'overlays' / 'cpu', combo)}]\n"
        f"components: [{os.path.relpath(K8S / 'components' / 'monitoring', combo)}]\n"
    )
    result["cpu-monitoring"] = _render("cpu-monitoring", combo)
    return result


@pytest.fixture(scope="session")
def rendered_files(rendered, tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("rendered")
    files = {}
    for name, r in rendered.items():
        files[name] = folder / f"{name}.yaml"
        files[name].write_text(r.text)
    return files
