"""Shared fixtures: the GPU device named by BIOGPU_PY_GPU, and the repository's test data."""

import os
from pathlib import Path

import pytest

import biogpu

#: The repository root (python/tests/../..), for the small test files in crates/*/tests/data.
REPO = Path(__file__).resolve().parents[2]
FLIM_DATA = REPO / "crates" / "flim-core" / "tests" / "data"


@pytest.fixture
def gpu_device():
    """The device named by BIOGPU_PY_GPU ("wgpu:software" in CI on lavapipe, "cuda" on the
    GPU machine); the test is skipped, saying why, when it is unset."""
    name = os.environ.get("BIOGPU_PY_GPU", "").strip()
    if not name:
        pytest.skip("BIOGPU_PY_GPU is unset: set it to a device (e.g. wgpu:software, cuda) to run GPU tests")
    ids = [d["id"] for d in biogpu.devices()]
    base = name.split(":")[0]
    if not any(i == name or i.startswith(base) for i in ids):
        pytest.fail(f"BIOGPU_PY_GPU={name} but this machine has only {ids}")
    return name


def biogpu_cli():
    """The `biogpu` CLI of this checkout (target/release/biogpu, or BIOGPU_CLI), or None."""
    named = os.environ.get("BIOGPU_CLI")
    if named:
        return Path(named)
    built = Path(os.environ.get("CARGO_TARGET_DIR", REPO / "target")) / "release" / "biogpu"
    return built if built.is_file() else None


@pytest.fixture
def cli():
    path = biogpu_cli()
    if path is None:
        pytest.skip("the biogpu CLI is not built (cargo build --release) and BIOGPU_CLI is unset")
    return path
