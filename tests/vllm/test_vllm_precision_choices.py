"""The vLLM sampler's precision choices: an fp32 head, and FP8 and batch-invariant kernels (refused on CPU)."""

from __future__ import annotations

import copy

import pytest
import torch

from precision_oat.errors import UserError
from precision_oat.precision.lm_head import use_fp32_head
from precision_oat.samplers.sampler import SamplingParams
from precision_oat.samplers.vllm_sampler import VLLMSampler
from tests.vllm.conftest import mean_abs_delta

pytestmark = pytest.mark.requires_vllm


def test_an_fp32_head_engine_samples_what_an_fp32_head_trainer_scores(engine, trained, recipe, hf_logprobs):
    model, folder = trained
    head = VLLMSampler(str(folder), "bfloat16", seed=0, kv_cache_gb=0.25, head_dtype="float32")
    head.load_weights(model.named_parameters())
    params = SamplingParams(n=1, max_new_tokens=64, seed=21)
    prompts = recipe.make_prompts(32, seed=5)
    trainers = {"same": copy.deepcopy(model).to(torch.bfloat16),
                "fp32": use_fp32_head(copy.deepcopy(model).to(torch.bfloat16))}
    gaps = {(side, kind): mean_abs_delta(trainer, sampler.generate(prompts, params), hf_logprobs)
            for side, sampler in (("same", engine("bfloat16")), ("fp32", head)) for kind, trainer in trainers.items()}
    # Each engine is nearest the trainer whose head computes as its own does (measured on this model: plain engine
    # 4.2e-3 to the plain trainer, 4.8e-3 to the fp32-head one; the fp32-head engine 3.5e-3 and 4.9e-3).
    assert gaps["fp32", "fp32"] * 1.2 < gaps["fp32", "same"], gaps
    assert gaps["same", "same"] * 1.05 < gaps["same", "fp32"], gaps


@pytest.mark.parametrize("choice, flag", [({"quantization": "fp8"}, "--sampler-dtype fp8"),
                                          ({"batch_invariant": True}, "--batch-invariant")])
def test_fp8_and_batch_invariant_kernels_are_refused_on_cpu_in_one_line(trained, choice, flag):
    with pytest.raises(UserError, match="run on CUDA only") as refused:
        VLLMSampler(str(trained[1]), "bfloat16", kv_cache_gb=0.1, **choice)
    assert flag in str(refused.value) and "\n" not in str(refused.value)
