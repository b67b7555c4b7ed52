"""Sampler→trainer corrections: π_old/μ ratios truncated (TIS) or masked (MIS) at C.

mask = [[1, 1, 0], [1, 1, 1]]; token ratios π_old/μ = [[3, 0.5, ·], [1, 1.5, 0.8]]
sequence ratios exp ρ_old = [3·0.5, 1·1.5·0.8] = [1.5, 1.2]
"""

import math

import pytest
import torch

from precision_oat.algorithms import (
    AlgorithmSpec, ClipMixin, NoCorrectionMixin, PolicyBatch, PolicyLoss, ReinforceMixin, SeqMISMixin, SeqTISMixin,
    TokenMISMixin, TokenTISMixin,
)

F64 = dict(dtype=torch.float64)
MASK = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]], **F64)
SAMPLER = torch.tensor([[-1.0, -2.0, -50.0], [-0.5, -1.5, -1.0]], **F64)
RATIOS = torch.tensor([[3.0, 0.5, 1.0], [1.0, 1.5, 0.8]], **F64)
OLD = SAMPLER + RATIOS.log()
OLD[0, 2] = 50.0  # padding: π_old/μ = e^100 would overflow any weight it reached


def make(mixin, cap):
    loss = type("L", (mixin, PolicyLoss), {})()
    loss.algo = AlgorithmSpec("drgrpo", "clip", "x", "token-mean", correction_cap=cap)
    return loss


def batch(logprobs_shift=0.0):
    # log π_θ differs from log π_old: corrections must not look at it
    logprobs = (OLD + logprobs_shift).requires_grad_(True)
    return PolicyBatch(logprobs, OLD.clone().requires_grad_(True), SAMPLER.clone(), torch.ones(2, **F64), MASK.clone())


def test_token_tis_truncates_at_cap():
    weight, stats = make(TokenTISMixin, 2.0).correction(batch())
    # [[min(3, 2), 0.5], [1, 1.5, 0.8]]
    expected = torch.tensor([[2.0, 0.5, 0.0], [1.0, 1.5, 0.8]], **F64)
    torch.testing.assert_close(weight * MASK, expected, atol=1e-12, rtol=1e-9)
    assert stats["mismatch/tis_clip_frac"] == pytest.approx(1 / 5, abs=1e-12)
    assert stats["mismatch/is_weight_mean"] == pytest.approx((2 + 0.5 + 1 + 1.5 + 0.8) / 5, abs=1e-12)


def test_token_mis_drops_tokens_above_cap():
    weight, stats = make(TokenMISMixin, 2.0).correction(batch())
    # [[3·1{3 ≤ 2} = 0, 0.5], [1, 1.5, 0.8]]
    expected = torch.tensor([[0.0, 0.5, 0.0], [1.0, 1.5, 0.8]], **F64)
    torch.testing.assert_close(weight * MASK, expected, atol=1e-12, rtol=1e-9)
    assert stats["mismatch/mis_mask_frac"] == pytest.approx(1 / 5, abs=1e-12)
    assert stats["mismatch/is_weight_mean"] == pytest.approx((0.5 + 1 + 1.5 + 0.8) / 5, abs=1e-12)


def test_seq_tis_truncates_the_sequence_weight():
    weight, stats = make(SeqTISMixin, 1.4).correction(batch())
    # [min(1.5, 1.4), min(1.2, 1.4)] = [1.4, 1.2]
    torch.testing.assert_close(weight, torch.tensor([[1.4], [1.2]], **F64), atol=1e-12, rtol=1e-9)
    assert stats["mismatch/tis_clip_frac"] == 0.5
    assert stats["mismatch/is_weight_mean"] == pytest.approx(1.3, abs=1e-12)


def test_seq_mis_drops_sequences_above_cap():
    weight, stats = make(SeqMISMixin, 1.4).correction(batch())
    # [1.5·1{1.5 ≤ 1.4}, 1.2·1{1.2 ≤ 1.4}] = [0, 1.2]
    torch.testing.assert_close(weight, torch.tensor([[0.0], [1.2]], **F64), atol=1e-12, rtol=1e-9)
    assert stats["mismatch/mis_mask_frac"] == 0.5
    assert stats["mismatch/is_weight_mean"] == pytest.approx(0.6, abs=1e-12)


@pytest.mark.parametrize("mixin", [TokenTISMixin, TokenMISMixin, SeqTISMixin, SeqMISMixin])
def test_corrections_use_pi_old_not_pi_theta_and_are_detached(mixin):
    w_same, _ = make(mixin, 1.4).correction(batch(0.0))
    w_moved, _ = make(mixin, 1.4).correction(batch(0.7))
    assert torch.equal(w_same, w_moved)
    assert not w_same.requires_grad
    assert torch.isfinite(w_same).all()


def test_truncation_and_masking_give_different_losses_for_a_weight_above_cap():
    # one sequence, two tokens, π_θ = π_old so the clip objective is −A·r = −1 per token (A = 1);
    # π_old/μ = [3, 0.5], C = 2:  TIS → (−2 − 0.5)/2 = −1.25;  MIS → (0 − 0.5)/2 = −0.25
    old = torch.tensor([[math.log(3.0), math.log(0.5)]], **F64)
    ones = torch.ones(1, 2, **F64)
    b = PolicyBatch(old.clone().requires_grad_(True), old, torch.zeros_like(ones), torch.ones(1, **F64), ones)
    losses = {}
    for mixin in (TokenTISMixin, TokenMISMixin):
        loss_fn = type("L", (mixin, ClipMixin, ReinforceMixin, PolicyLoss), {})()
        loss_fn.algo = AlgorithmSpec("reinforce", "clip", "x", "token-mean", correction_cap=2.0)
        losses[mixin] = loss_fn.policy_loss(b)[0].item()
    assert losses[TokenTISMixin] == pytest.approx(-1.25, abs=1e-12)
    assert losses[TokenMISMixin] == pytest.approx(-0.25, abs=1e-12)


@pytest.mark.parametrize("mixin, name", [(TokenTISMixin, "token-tis"), (TokenMISMixin, "token-mis"),
                                         (SeqTISMixin, "seq-tis"), (SeqMISMixin, "seq-mis")])
def test_corrections_without_a_cap_name_the_flag(mixin, name):
    with pytest.raises(ValueError, match=rf"--correction {name}.*--correction-cap"):
        make(mixin, None).correction(batch())


def test_no_correction_is_a_weight_of_one():
    weight, stats = NoCorrectionMixin().correction(batch())
    assert torch.equal(weight, torch.ones_like(MASK)) and stats == {}
