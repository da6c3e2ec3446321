"""Shared fixtures: tiny random Llama/Qwen2 checkpoints and the default SmolLM2 folder."""

from __future__ import annotations

import ctypes
import gc
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from pool_checks import assert_pool_whole
from tiny_models import make_tiny

from radixrt.model.cpu.runtime import AUTO_DTYPE_ENV
from radixrt.model.families.loader import resolve_model_path

__all__ = ["assert_pool_whole"]  # older tests import it from here

# float32 is the reference the tests compare with transformers in: `dtype auto` on the CPU
# stays float32 here (and in every server a test starts) on every machine; tests of
# bfloat16 ask for it by name.
os.environ[AUTO_DTYPE_ENV] = "float32"
# Without CUDA, triton kernels run in Triton's interpreter (the triton backend's tests). Triton
# reads the variable when a kernel is defined and again when it is launched, so it is set here,
# before any test module imports a kernel, and stays set for the session.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="module", autouse=True)
def _give_memory_back_after_each_module() -> Iterator[None]:
    """After a module's fixtures are gone, collect cycles and hand freed heap back to the OS:
    the suite runs in one process, and models freed but kept by the allocator add up (a run
    of the whole suite grew past 13 GB without this)."""
    yield
    gc.collect()
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL("libc.so.6").malloc_trim(0)
        except OSError:  # not glibc
            pass


@pytest.fixture(scope="session")
def smollm2_path() -> Path:
    """The default model converted to a safetensors folder (converted once, then cached)."""
    return resolve_model_path(None)


@pytest.fixture(scope="session")
def tiny_llama_path(tmp_path_factory: pytest.TempPathFactory, smollm2_path: Path) -> Path:
    return make_tiny(tmp_path_factory.mktemp("tiny_llama"), smollm2_path, "llama")


@pytest.fixture(scope="session")
def tiny_llama_long_path(tmp_path_factory: pytest.TempPathFactory, smollm2_path: Path) -> Path:
    """The tiny Llama with 2048 positions (long outputs)."""
    return make_tiny(
        tmp_path_factory.mktemp("tiny_llama_long"),
        smollm2_path,
        "llama",
        max_position_embeddings=2048,
    )


@pytest.fixture(scope="session")
def tiny_qwen2_path(tmp_path_factory: pytest.TempPathFactory, smollm2_path: Path) -> Path:
    return make_tiny(
        tmp_path_factory.mktemp("tiny_qwen2"), smollm2_path, "qwen2", tie_word_embeddings=True
    )


@pytest.fixture(scope="session")
def tiny_llama3_path(tmp_path_factory: pytest.TempPathFactory, smollm2_path: Path) -> Path:
    """Llama with Llama-3 rope scaling and GQA 4:1."""
    scaling = {
        "rope_type": "llama3",
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 64,
    }
    return make_tiny(
        tmp_path_factory.mktemp("tiny_llama3"),
        smollm2_path,
        "llama",
        num_key_value_heads=1,
        rope_scaling=scaling,
        rope_theta=500000.0,
    )
