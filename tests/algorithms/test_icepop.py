"""IcePop: π_old/μ kept as the token's weight inside [α, β], 0 outside.

mask = [[1, 1, 1, 0], [1, 1, 1, 1]]; token ratios π_old/μ = [[0.4, 1, 4, ·], [6, 0.6, 2, 1.25]]
(no ratio sits on a band's end, where rounding would decide).
"""

import math

import pytest
import torch

from precision_oat.algorithms import (
    AlgorithmSpec, ClipMixin, IcePopMixin, PolicyBatch, PolicyLoss, ReinforceMixin, TokenMISMixin, resolve,
)
from tests.algorithms.corrections_case import correction_batch, correction_loss

F64 = dict(dtype=torch.float64)
MASK = torch.tensor([[1.0, 1.0, 1.0, 0.0], [1.0, 1.0, 1.0, 1.0]], **F64)
SAMPLER = torch.tensor([[-1.0, -2.0, -3.0, -50.0], [-0.5, -1.5, -1.0, -2.5]], **F64)
RATIOS = torch.tensor([[0.4, 1.0, 4.0, 1.0], [6.0, 0.6, 2.0, 1.25]], **F64)
OLD = SAMPLER + RATIOS.log()
OLD[0, 3] = 50.0  # padding: π_old/μ = e^100 would overflow any weight it reached


def make(mixin=IcePopMixin, **constants):
    return correction_loss(mixin, "icepop", **constants)


def batch(logprobs_shift=0.0):
    return correction_batch(OLD, SAMPLER, MASK, logprobs_shift)


def test_default_band_keeps_the_ratio_inside_half_to_five_and_drops_the_rest():
    weight, stats = make().correction(batch())
    # α = 0.5, β = 5: 0.4 and 6 fall outside; the rest keep their ratio
    expected = torch.tensor([[0.0, 1.0, 4.0, 0.0], [0.0, 0.6, 2.0, 1.25]], **F64)
    torch.testing.assert_close(weight * MASK, expected, atol=1e-12, rtol=0)
    # 2 of the 7 response tokens dropped; mean weight (1 + 4 + 0.6 + 2 + 1.25) / 7 = 8.85 / 7
    assert stats["mismatch/icepop_mask_frac"] == pytest.approx(2 / 7, abs=1e-12)
    assert stats["mismatch/is_weight_mean"] == pytest.approx(8.85 / 7, abs=1e-12)


def test_a_narrow_band_drops_on_both_sides():
    weight, stats = make(icepop_low=0.7, icepop_high=1.5).correction(batch())
    # [0.7, 1.5] keeps only 1 and 1.25: 0.4, 0.6 below it; 4, 6, 2 above it
    expected = torch.tensor([[0.0, 1.0, 0.0, 0.0], [0.0, 0.0, 0.0, 1.25]], **F64)
    torch.testing.assert_close(weight * MASK, expected, atol=1e-12, rtol=0)
    assert stats["mismatch/icepop_mask_frac"] == pytest.approx(5 / 7, abs=1e-12)


def test_with_no_lower_end_icepop_is_token_mis_at_the_upper_end():
    icepop, _ = make(icepop_low=1e-12, icepop_high=5.0).correction(batch())
    mis, _ = make(TokenMISMixin, correction_cap=5.0).correction(batch())
    torch.testing.assert_close(icepop * MASK, mis * MASK, atol=1e-12, rtol=0)


def test_the_weight_reads_pi_old_not_pi_theta_and_is_detached_and_finite():
    same, _ = make().correction(batch(0.0))
    moved, _ = make().correction(batch(0.7))
    assert torch.equal(same, moved)
    assert not same.requires_grad and torch.isfinite(same).all()


def test_a_dropped_token_contributes_nothing_to_the_clip_loss():
    # one sequence, π_θ = π_old so every clip term is −A·r = −1 (A = 1); π_old/μ = [0.4, 2]:
    # IcePop weighs [0, 2], the token mean is (0·(−1) + 2·(−1)) / 2 = −1
    old = torch.tensor([[math.log(0.4), math.log(2.0)]], **F64)
    ones = torch.ones(1, 2, **F64)
    b = PolicyBatch(old.clone().requires_grad_(True), old, torch.zeros_like(ones), torch.ones(1, **F64), ones)
    loss_fn = type("L", (IcePopMixin, ClipMixin, ReinforceMixin, PolicyLoss), {})()
    loss_fn.algo = AlgorithmSpec("reinforce", "clip", "icepop", "token-mean")
    loss, _ = loss_fn.policy_loss(b)
    assert loss.item() == pytest.approx(-1.0, abs=1e-12)
    loss.backward()
    # d loss / d log π_θ,t = −A·w_t·r_t / 2 = [0, −1]
    torch.testing.assert_close(b.logprobs.grad, torch.tensor([[0.0, -1.0]], **F64), atol=1e-12, rtol=0)


def test_the_recipe_and_its_band_flags_resolve():
    spec = resolve("grpo-icepop", max_gen_length=8)
    assert (spec.objective, spec.correction, spec.icepop_low, spec.icepop_high) == ("clip", "icepop", 0.5, 5.0)
    assert resolve("grpo-icepop", icepop_low=0.8, icepop_high=1.2, max_gen_length=8).icepop_high == 1.2


@pytest.mark.parametrize("low, high", [(1.1, 5.0), (0.5, 0.9), (0.0, 5.0), (0.5, math.inf)])
def test_a_band_that_is_not_positive_or_leaves_out_one_names_the_flags(low, high):
    with pytest.raises(ValueError, match="--icepop-"):
        resolve("grpo-icepop", icepop_low=low, icepop_high=high, max_gen_length=8)
