"""Shared fixtures of the vLLM suite: one small trained model, one vLLM engine per dtype.

Every test here needs a real vLLM; without one the whole folder is skipped, unless
``PRECISION_OAT_REQUIRE=vllm`` (set by scripts/test.sh, which runs it in the venv that
``scripts/vllm_env.sh`` builds), where a missing vLLM is an error. Engines start once
per session and are shared: a test that needs particular weights pushes them first.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import torch

from precision_oat.samplers.vllm_sampler import VLLMSampler, is_vllm_available
from tests.conftest import load_script

HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config, items):
    if is_vllm_available():
        return
    if os.environ.get("PRECISION_OAT_REQUIRE") == "vllm":
        # scripts/test.sh runs this folder in the vLLM venv: there a missing vLLM is a failure.
        raise pytest.UsageError("PRECISION_OAT_REQUIRE=vllm but vLLM is not importable in " + sys.executable)
    skip = pytest.mark.skip(reason="vLLM is not installed; run in the venv printed by scripts/vllm_env.sh")
    for item in items:
        if HERE in Path(str(item.fspath)).resolve().parents:
            item.add_marker(skip)


def _load_recipe():
    return load_script("benchmarks/vllm_mismatch.py")


@pytest.fixture(scope="session")
def recipe():
    """The model recipe of benchmarks/vllm_mismatch.py: corpus, config, training, rescoring."""
    return _load_recipe()


@pytest.fixture(scope="session")
def trained(recipe, tmp_path_factory):
    """A ~0.5M-parameter Qwen2 trained for 100 steps on addition facts, and its checkpoint folder."""
    model, _ = recipe.train_tiny_lm(hidden=128, layers=2, steps=100, batch=16, seq_len=64, seed=0)
    folder = tmp_path_factory.mktemp("tiny-lm")
    model.save_pretrained(folder)
    return model, folder


@pytest.fixture(scope="session")
def _engines():
    return {}


@pytest.fixture
def engine(trained, _engines):
    """``engine(dtype)``: the session's vLLM sampler in that dtype, holding the trained weights."""
    model, folder = trained

    def get(dtype: str) -> VLLMSampler:
        if dtype not in _engines:
            _engines[dtype] = VLLMSampler(str(folder), dtype, seed=0, kv_cache_gb=0.25)
        _engines[dtype].load_weights(model.state_dict().items())
        return _engines[dtype]

    return get


@pytest.fixture
def hf_logprobs(recipe):
    """``hf_logprobs(model, completions, temperature)``: fp32 full-forward log-probs per completion."""

    def score(model, completions, temperature: float = 1.0) -> list[torch.Tensor]:
        return recipe.rescore(model, [c.prompt_ids for c in completions], [c.response_ids for c in completions], temperature)

    return score


def mean_abs_delta(model, completions, hf_logprobs) -> float:
    """Mean |log π − log μ| over the completions' tokens, π from ``hf_logprobs`` of ``model`` (at T = 1)."""
    pi = torch.cat(hf_logprobs(model, completions))
    mu = torch.cat([torch.tensor(c.logprobs) for c in completions])
    return (pi - mu).abs().mean().item()
