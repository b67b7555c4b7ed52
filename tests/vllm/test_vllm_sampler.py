"""VLLMSampler against the sampler seam: shapes, ordering, stops, seeds, errors."""

from __future__ import annotations

import gc
import json
import math
import subprocess
import sys

import pytest

from precision_oat.precision.policy import Precision
from precision_oat.samplers.sampler import SamplingParams
from precision_oat.samplers.vllm_sampler import VLLMSampler

pytestmark = pytest.mark.requires_vllm


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_generate_returns_n_per_prompt_prompt_major_with_stop_kept(engine, recipe, dtype):
    sampler = engine(dtype)
    prompts = recipe.make_prompts(3, seed=7)
    prompts[1] = prompts[1][:5]  # prompts of different lengths
    params = SamplingParams(n=4, temperature=1.0, max_new_tokens=24, stop_token_ids=(recipe.SEP,), seed=11)
    completions = sampler.generate(prompts, params)

    assert len(completions) == 3 * 4
    assert [c.prompt_ids for c in completions] == [p for p in prompts for _ in range(4)]
    for c in completions:
        assert len(c.response_ids) == len(c.logprobs) >= 1
        assert all(math.isfinite(lp) and lp <= 0.0 for lp in c.logprobs)
        # Stop semantics: the stop token ends the response, is kept, and appears nowhere else.
        assert c.finished == (c.response_ids[-1] == recipe.SEP)
        assert recipe.SEP not in c.response_ids[:-1]
        if not c.finished:
            assert len(c.response_ids) == 24
    # A trained model writes a separator every few tokens: most responses must have stopped.
    assert sum(c.finished for c in completions) >= 8


def test_without_stop_ids_every_response_has_max_new_tokens(engine, recipe):
    completions = engine("float32").generate(recipe.make_prompts(2), SamplingParams(n=2, max_new_tokens=17, seed=0))
    assert [len(c.response_ids) for c in completions] == [17] * 4
    assert not any(c.finished for c in completions)


def test_garbage_collection_waits_until_a_batch_is_generated_and_the_collector_is_as_it_was_after(engine, recipe):
    sampler = engine("float32")
    prompts, params = recipe.make_prompts(32), SamplingParams(n=4, max_new_tokens=32, stop_token_ids=(), seed=0)
    sampler.generate(prompts, params)  # once before: a batch of a new shape is compiled, and compiling collects
    collections = []

    def started(phase, info):
        if phase == "start":
            collections.append(info["generation"])

    gc.collect()  # the allocation counts start from zero, so that no collection is due as the call begins
    gc.callbacks.append(started)
    try:
        completions = sampler.generate(prompts, params)  # a few new Python objects a token
        during = list(collections)
        assert gc.isenabled()
        gc.disable()
        sampler.generate(prompts[:2], params)
        assert not gc.isenabled()  # a caller's choice is left as it was
    finally:
        gc.enable()
        gc.callbacks.remove(started)
    # Without the pause a batch this size sets off dozens; with it, only the one due as the collector resumes.
    assert len(completions) == 128 and len(during) <= 1


def test_flat_log_prob_lists_give_the_completions_of_the_dicts_per_token_and_the_sampler_takes_them(engine, recipe):
    import vllm
    from vllm.inputs import TokensPrompt

    from precision_oat.samplers.vllm_requests import completions_from, request_params

    sampler = engine("float32")
    prompts, params = recipe.make_prompts(4), SamplingParams(n=2, max_new_tokens=16, stop_token_ids=(), seed=3)
    rows = [p for p in prompts for _ in range(params.n)]
    each = {}
    for flat in (False, True):
        requests = request_params(vllm, params, len(prompts), flat_logprobs=flat)
        outputs = sampler._llm.generate([TokensPrompt(prompt_token_ids=p) for p in rows], requests, use_tqdm=False)
        assert isinstance(outputs[0].outputs[0].logprobs, list) is not flat
        each[flat] = completions_from(rows, outputs, params)
    assert each[True] == each[False] and all(len(c.logprobs) == 16 for c in each[True])
    assert sampler.generate(prompts, params) == each[True]


def test_same_seed_same_samples_and_samples_of_a_batch_differ(engine, recipe):
    sampler = engine("float32")
    prompts = [recipe.make_prompts(1)[0]] * 2  # the same prompt twice
    params = SamplingParams(n=3, max_new_tokens=16, seed=5)
    first = sampler.generate(prompts, params)
    again = sampler.generate(prompts, params)
    assert [c.response_ids for c in first] == [c.response_ids for c in again]
    assert [c.logprobs for c in first] == [c.logprobs for c in again]
    # Six draws of 16 tokens from one prompt: they are distinct streams, not copies.
    assert len({tuple(c.response_ids) for c in first}) == 6
    other = sampler.generate(prompts, SamplingParams(n=3, max_new_tokens=16, seed=6))
    assert [c.response_ids for c in other] != [c.response_ids for c in first]


def test_a_batch_sampled_in_slices_gives_the_same_responses(engine, recipe):
    # Data-parallel ranks sample slices of one batch, each placed by ``first_prompt``.
    sampler = engine("float32")
    prompts = recipe.make_prompts(4, seed=3)
    params = SamplingParams(n=2, max_new_tokens=16, seed=9)
    whole = sampler.generate(prompts, params)
    head = sampler.generate(prompts[:2], params)
    tail = sampler.generate(prompts[2:], SamplingParams(n=2, max_new_tokens=16, seed=9, first_prompt=2))
    assert [c.response_ids for c in head + tail] == [c.response_ids for c in whole]


def test_identical_prompts_draw_different_samples_at_the_same_sample_index(engine, recipe):
    # Every sample is a request seeded with its row's seed. With one seed for every request,
    # sample k of two identical prompts would draw the same noise.
    sampler = engine("float32")
    prompt, n = recipe.make_prompts(1, seed=3)[0], 3
    both = sampler.generate([prompt, prompt], SamplingParams(n=n, max_new_tokens=16, seed=5))
    for k in range(n):
        assert both[k].response_ids != both[n + k].response_ids, f"sample {k} of both prompts is one draw"
    # The second prompt's samples are those of rows n … 2n − 1, wherever the prompt is sampled.
    alone = sampler.generate([prompt], SamplingParams(n=n, max_new_tokens=16, seed=5, first_prompt=1))
    assert [c.response_ids for c in both[n:]] == [c.response_ids for c in alone]


def test_a_batch_seeded_s_plus_n_does_not_redraw_the_rows_of_a_batch_seeded_s(engine, recipe):
    # Row seeds s + row would make a batch seeded 5 + n draw the second prompt's rows of one seeded 5.
    sampler = engine("float32")
    prompt, n = recipe.make_prompts(1, seed=3)[0], 3
    both = sampler.generate([prompt, prompt], SamplingParams(n=n, max_new_tokens=16, seed=5))
    shifted = sampler.generate([prompt], SamplingParams(n=n, max_new_tokens=16, seed=5 + n))
    for k in range(n):
        assert both[n + k].response_ids != shifted[k].response_ids, f"sample {k} is one draw under two seeds"


def test_unseeded_requests_vary_between_calls(engine, recipe):
    sampler = engine("float32")
    params = SamplingParams(n=2, max_new_tokens=16)
    a = sampler.generate(recipe.make_prompts(2), params)
    b = sampler.generate(recipe.make_prompts(2), params)
    assert [c.response_ids for c in a] != [c.response_ids for c in b]


def test_without_row_seeds_a_batch_seed_reproduces_the_batch_and_leaves_the_callers_streams(engine, recipe, trained):
    import torch

    from precision_oat.args import RolloutArgs
    from precision_oat.models import Policy
    from precision_oat.samplers.vllm_sampler import vllm_sampler_for

    model, folder = trained
    rollout = RolloutArgs(sampler="vllm", vllm_row_seeds=False, vllm_kv_cache_gb=0.25, max_prompt_length=16)
    sampler = vllm_sampler_for(Policy(model, None, folder), Precision.from_flags("fp32"), rollout, seed=0, folder=None,
                               longest_response=16)
    prompt, n = recipe.make_prompts(1, seed=3)[0], 3
    params = SamplingParams(n=n, max_new_tokens=16, seed=5)

    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    first = sampler.generate([prompt, prompt], params)
    assert torch.equal(torch.rand(3), expected), "the batch's seed replaced the caller's stream"
    again = sampler.generate([prompt, prompt], params)
    assert [c.response_ids for c in again] == [c.response_ids for c in first]
    assert [c.logprobs for c in again] == [c.logprobs for c in first]
    # One seed, six rows: each row still draws its own noise.
    assert len({tuple(c.response_ids) for c in first}) == 2 * n
    other = sampler.generate([prompt, prompt], SamplingParams(n=n, max_new_tokens=16, seed=6))
    assert [c.response_ids for c in other] != [c.response_ids for c in first]
    # The draws are the batch's, not those of the rows' own seeds.
    row_seeded = engine("float32").generate([prompt, prompt], params)
    assert [c.response_ids for c in row_seeded] != [c.response_ids for c in first]


def test_model_vllm_cannot_load_fails_at_construction_naming_the_path(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["NoSuchForCausalLM"], "model_type": "no_such"}))
    with pytest.raises(ValueError, match=str(tmp_path)):
        VLLMSampler(str(tmp_path), "float32")


def test_missing_checkpoint_fails_naming_the_path(tmp_path):
    with pytest.raises(FileNotFoundError, match=str(tmp_path / "absent")):
        VLLMSampler(str(tmp_path / "absent"), "float32")


def test_without_vllm_import_works_and_construction_says_how_to_install(tmp_path):
    # A child process where `import vllm` fails, as on a machine without it.
    code = (
        "import sys; sys.modules['vllm'] = None\n"
        "from precision_oat.samplers import vllm_sampler as m\n"
        "assert not m.is_vllm_available()\n"
        "try:\n"
        f"    m.VLLMSampler({str(tmp_path)!r}, 'float32')\n"
        "except ImportError as e:\n"
        "    print(e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert 'pip install -e ".[vllm]"' in out
    assert "bash scripts/vllm_env.sh" in out


def test_construction_leaves_torch_threads_and_global_rng_as_they_were(trained):
    import random

    import numpy as np
    import torch

    torch.set_num_threads(2)
    torch.manual_seed(123), np.random.seed(123), random.seed(123)
    expected = torch.rand(3), np.random.rand(3), random.random()
    torch.manual_seed(123), np.random.seed(123), random.seed(123)

    VLLMSampler(str(trained[1]), "float32", seed=7, kv_cache_gb=0.1)

    assert torch.get_num_threads() == 2
    assert torch.equal(torch.rand(3), expected[0])
    assert np.array_equal(np.random.rand(3), expected[1]) and random.random() == expected[2]
    torch.set_num_threads(1)
    assert torch.get_num_threads() == 1, "vLLM-CPU's no-op torch.set_num_threads must be undone"
    torch.set_num_threads(2)


def test_a_kv_cache_too_small_for_one_sequence_is_one_line_naming_the_flags(trained):
    from precision_oat.errors import UserError

    _, folder = trained
    # About 1 KiB of KV cache: not one block of one sequence.
    with pytest.raises(UserError, match="KV cache cannot hold one sequence .*--vllm-kv-cache-gb.*--max-new-tokens") \
            as caught:
        VLLMSampler(str(folder), "float32", kv_cache_gb=1e-6, max_model_len=64)
    assert "\n" not in str(caught.value) and isinstance(caught.value.__cause__, ValueError)


def test_vllm_max_num_seqs_caps_the_running_batch_and_every_request_still_completes(trained):
    from precision_oat.args import RolloutArgs
    from precision_oat.models import Policy
    from precision_oat.samplers.sampler import SamplingParams
    from precision_oat.samplers.vllm_sampler import vllm_sampler_for

    model, folder = trained
    rollout = RolloutArgs(sampler="vllm", vllm_max_num_seqs=2, vllm_kv_cache_gb=0.1, max_prompt_length=8)
    sampler = vllm_sampler_for(Policy(model, None, folder), Precision.from_flags("fp32"), rollout, seed=0, folder=None,
                               longest_response=4)
    assert sampler._llm.llm_engine.vllm_config.scheduler_config.max_num_seqs == 2
    # Six requests through a batch of at most two: the rest wait their turn, none is dropped.
    completions = sampler.generate([[1, 2, 3], [4, 5]], SamplingParams(n=3, max_new_tokens=4, stop_token_ids=(), seed=0))
    assert len(completions) == 6 and all(len(c.response_ids) == 4 for c in completions)


def test_the_engine_runs_eagerly_on_cpu_whatever_it_was_asked(trained):
    _, folder = trained
    sampler = VLLMSampler(str(folder), "float32", kv_cache_gb=0.1, enforce_eager=False)
    assert sampler._llm.llm_engine.vllm_config.model_config.enforce_eager
