"""Top-p on both sides: the sampler's kept sets recorded, the trainer scoring under the same truncation."""

from __future__ import annotations

import json
import math
from functools import partial

import torch

from precision_oat.backends.local.driver import train
from precision_oat.rl.rollout import collate
from precision_oat.rl.scoring import logits_logprobs, score, token_logprobs
from precision_oat.rl.truncation import Truncation
from precision_oat.samplers.kv_cache import KVCacheSampler
from precision_oat.samplers.sampler import SamplingParams
from tests.conftest import tiny_model
from tests.backends.helpers import make_args

PROMPTS = [[3, 4, 5], [6, 7, 8, 9, 10], [11, 12]]


def test_renormalised_logprob_and_gradient_hand_derived():
    # One row of 3 tokens [0, 1, 2]: column 0 predicts token 1, column 1 predicts token 2.
    logits = torch.tensor([[[2.0, 1.0, 0.0, -1.0], [0.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]]], requires_grad=True)
    ids = torch.tensor([[0, 1, 2]])
    # Column 0 kept {0, 1}; column 1 carries no set (scored under the full softmax).
    truncation = Truncation(counts=torch.tensor([[2, 0]]), ids=torch.tensor([0, 1]))
    logps = logits_logprobs(logits, ids, 1.0, truncation)
    # log(e^1 / (e^2 + e^1)) = −log(1 + e); uniform over 4: −log 4.
    assert torch.allclose(logps, torch.tensor([[-math.log(1 + math.e), -math.log(4.0)]]), atol=1e-6)
    logps[0, 0].backward()
    # d/dz of z_1 − log(e^z0 + e^z1): −σ, 1 − σ over the kept pair; 0 for the dropped tokens.
    s = math.e / (1 + math.e)
    assert torch.allclose(logits.grad[0, 0], torch.tensor([-s, s, 0.0, 0.0]), atol=1e-6)
    assert torch.count_nonzero(logits.grad[0, 1:]) == 0


def _top_p_rollout(top_p: float):
    model = tiny_model("llama", vocab=32)  # untied, the sampler's own decoder
    sampler = KVCacheSampler(model, torch.float32, pad_token_id=0)
    params = SamplingParams(n=4, temperature=1.0, top_p=top_p, max_new_tokens=10, stop_token_ids=(1,), seed=0,
                            kept_sets=True)
    completions = sampler.generate(PROMPTS, params)
    return model, collate(completions, [0.0] * len(completions), 4, 0)


def test_fp32_sampler_and_trainer_agree_under_top_p_only_when_the_trainer_truncates():
    model, rollout = _top_p_rollout(0.8)
    mask = rollout.response_mask.bool()
    counts = rollout.truncation.counts
    # Every response token has its kept set, the rest none; the random model's flat distribution keeps many.
    assert bool((counts[mask] >= 1).all()) and int(counts[~mask].sum()) == 0
    assert float(counts[mask].float().mean()) > 5
    forward = partial(token_logprobs, model, temperature=1.0)
    # Micro-batches of 5 rows: the kept sets are cut along with the rows.
    truncated = score(forward, rollout.input_ids, rollout.attention_mask, 5, rollout.truncation)
    full = score(forward, rollout.input_ids, rollout.attention_mask, 5)
    log_ratio = (truncated - rollout.sampler_logprobs)[mask]
    assert float(log_ratio.abs().max()) < 1e-5
    # Without the truncation the trainer spreads mass over the dropped tokens: π_old < μ on every token.
    untruncated = (full - rollout.sampler_logprobs)[mask]
    assert float(untruncated.max()) < 0 and float(untruncated.abs().mean()) > 0.05


def test_top_p_one_records_nothing():
    _, rollout = _top_p_rollout(1.0)
    assert rollout.truncation is None


def test_rollout_select_keeps_each_rows_kept_sets():
    _, rollout = _top_p_rollout(0.8)
    index = torch.tensor([7, 2, 10])
    part = rollout.select(index)
    rows = [rollout.truncation.select(torch.tensor([i]), rollout.input_ids.shape[1] - 1) for i in index.tolist()]
    assert torch.equal(part.truncation.ids, torch.cat([r.ids for r in rows]))
    width = part.input_ids.shape[1] - 1
    assert torch.equal(part.truncation.counts, torch.cat([r.counts[:, :width] for r in rows]))
    assert int(part.truncation.counts.sum()) == len(part.truncation.ids)


def test_fp32_run_at_top_p_has_no_mismatch(tmp_path, embedded_policy_dir):
    # T = 2 flattens the warmed-up policy so that top-p 0.8 keeps several tokens.
    train(make_args(model=str(embedded_policy_dir), dtype="fp32", top_p=0.8, temperature=2.0, steps=1,
                    output_dir=str(tmp_path)))
    row = json.loads((tmp_path / "metrics.jsonl").read_text().splitlines()[0])
    assert row["mismatch/abs_logp_diff_max"] < 1e-5
    assert row["precision/self_gap_abs_max"] < 1e-5
