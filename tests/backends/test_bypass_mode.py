"""Bypass mode: the loss takes μ as π_old (the clip ratio is π_θ/μ) and the step runs no scoring pass.

The rollout's μ is set by hand to the trainer's own π divided by 2 on every response token
(log μ = log π − ln 2), so every ratio the step sees is known: π_θ/μ = 2 before the update.
"""

import dataclasses
import math

import pytest
import torch

from tests.backends.test_local_learner import build, rollout_of
from tests.conftest import tiny_model

LN2 = math.log(2.0)


def halved_sampler(rollout, learner):
    """The rollout with log μ = log π − ln 2 on its response tokens, π the learner's no-grad score."""
    trainer = learner.score(rollout)
    mu = torch.where(rollout.response_mask > 0, trainer - LN2, 0.0)
    return dataclasses.replace(rollout, sampler_logprobs=mu)


def decoder_rows(learner):
    rows = []
    learner.model.get_decoder().register_forward_hook(
        lambda m, args, kwargs, out: rows.append(len(kwargs["input_ids"])), with_kwargs=True)
    return rows


def test_the_clip_ratio_is_pi_theta_over_mu_and_no_scoring_pass_runs():
    model = tiny_model()
    # 16 responses in one micro-batch: the statistics are those of the whole step.
    learner = build(model, dtype="fp32", algo="grpo", num_samples=4, micro_batch_size=16, bypass_mode=True)
    rollout = halved_sampler(rollout_of(model, max_new_tokens=6), learner)
    rows = decoder_rows(learner)
    stats = learner.update(rollout, step=0).stats

    # One forward per response, the update's: no scoring pass.
    assert sum(rows) == rollout.num_sequences
    # r_t = π_θ/μ = 2 on every token before the step (fp32: π_θ equals the score up to ~1e-7).
    assert stats["loss/ratio_mean"] == pytest.approx(2.0, abs=1e-5)
    # Rewards alternate 0, 1 in each group of 4, so Dr.GRPO's A = r − 0.5 = ±0.5. With r = 2 > 1 + 0.2 the clip
    # binds where A > 0 (−1.2·A > −2·A) and not where A < 0: the share of response tokens in the rows with r = 1.
    mask = rollout.response_mask
    by_hand = float(mask[rollout.rewards > 0].sum() / mask.sum())
    assert 0.2 < by_hand < 0.8
    assert stats["loss/clip_frac"] == pytest.approx(by_hand, abs=1e-12)
    assert stats["phantom/clip_frac"] == pytest.approx(by_hand, abs=1e-12)
    # The mismatch keys still compare μ with the trainer (its forward in the update): |Δ| = ln 2, k1 = −ln 2.
    assert stats["mismatch/abs_logp_diff_mean"] == pytest.approx(LN2, abs=1e-5)
    assert stats["mismatch/k1"] == pytest.approx(-LN2, abs=1e-5)
    assert stats["ratio/precision_gap_abs_mean"] == pytest.approx(LN2, abs=1e-5)
    assert stats["precision/self_gap_abs_mean"] == 0.0


def updated_weights(algo, **flags):
    model = tiny_model()
    learner = build(model, dtype="fp32", algo=algo, num_samples=4, micro_batch_size=4, **flags)
    rollout = halved_sampler(rollout_of(model, max_new_tokens=6), learner)
    learner.update(rollout, step=0)
    return [p.detach().clone() for p in learner.model.parameters()]


def test_clip_trains_otherwise_than_without_rescoring_and_pg_the_same():
    # --no-rescore also skips the scoring pass but keeps π_old = π_θ (ratio 1): with μ = π/2 the clip of
    # bypass mode binds and the step differs. IS-PG never reads π_old, so the two steps are equal.
    bypass, no_rescore = updated_weights("grpo", bypass_mode=True), updated_weights("grpo", rescore=False)
    assert any(not torch.equal(a, b) for a, b in zip(bypass, no_rescore))
    bypass, no_rescore = updated_weights("pg", bypass_mode=True), updated_weights("pg", rescore=False)
    assert all(torch.equal(a, b) for a, b in zip(bypass, no_rescore))
