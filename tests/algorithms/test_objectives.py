"""Objectives on 2 sequences × 3 tokens; the last token of sequence 1 is padding.

mask = [[1, 1, 0],
        [1, 1, 1]]
Padding holds values far from the others to show it never leaks into a weight or a loss.
"""

import math

import pytest
import torch

from precision_oat.algorithms import (
    AlgorithmSpec, ClipMixin, ConstantNormMixin, GSPOMixin, ISPGMixin, PolicyBatch, PolicyLoss, SeqMeanMixin,
    TokenISPGMixin,
)

F64 = dict(dtype=torch.float64)
MASK = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]], **F64)


def make(*mixins, **spec):
    loss = type("L", (*mixins, PolicyLoss), {})()
    loss.algo = AlgorithmSpec("drgrpo", "x", "none", "token-mean", **spec)
    return loss


def batch(logprobs, old=None, sampler=None, advantages=(2.0, -1.0)):
    logprobs = torch.tensor(logprobs, **F64, requires_grad=True)
    old = logprobs.detach().clone() if old is None else torch.tensor(old, **F64)
    sampler = logprobs.detach().clone() if sampler is None else torch.tensor(sampler, **F64)
    return PolicyBatch(logprobs, old, sampler, torch.tensor(advantages, **F64), MASK.clone())


# Δ = log π_θ − log μ:  row 1 [0.1, −0.1, ·] → ρ = 0;   row 2 [0, −0.5, 0.2] → ρ = −0.3
LOGP = [[-1.0, -2.0, -5.0], [-0.5, -1.5, -1.0]]
MU = [[-1.1, -1.9, 30.0], [-0.5, -1.0, -1.2]]


def test_ispg_weights_each_sequence_by_exp_rho():
    b = batch(LOGP, sampler=MU)
    per_token, stats = make(ISPGMixin).objective(b)
    w2 = math.exp(-0.3)  # 0.740818
    # loss_t = −w·A·log π:  row 1: −1·2·[−1, −2] = [2, 4]
    #                      row 2: −w2·(−1)·[−0.5, −1.5, −1] = −w2·[0.5, 1.5, 1]
    expected = torch.tensor([[2.0, 4.0, 0.0], [-0.5 * w2, -1.5 * w2, -w2]], **F64)
    torch.testing.assert_close(per_token * MASK, expected, atol=1e-9, rtol=1e-7)
    assert stats["loss/is_weight_mean"] == pytest.approx((1 + w2) / 2, abs=1e-9)
    assert stats["mismatch/is_clip_frac"] == 0.0


def test_ispg_truncates_the_weight_at_is_cap():
    # ρ1 = 0 → exp ρ1 = 1 > 0.9 → w1 = 0.9 (clipped);  ρ2 = −0.3 → w2 = 0.740818 (kept)
    per_token, stats = make(ISPGMixin, is_cap=0.9).objective(batch(LOGP, sampler=MU))
    torch.testing.assert_close(per_token[0, :2], torch.tensor([1.8, 3.6], **F64), atol=1e-9, rtol=1e-7)
    assert stats["loss/is_weight_mean"] == pytest.approx((0.9 + math.exp(-0.3)) / 2, abs=1e-9)
    assert stats["mismatch/is_clip_frac"] == 0.5


def test_ispg_gradient_is_minus_weight_times_advantage_over_the_denominator():
    # constant reduction with L = 4 and N_seq = 2: ∂L/∂log π_bt = −w_b·A_b·m_bt / (4·2)
    b = batch(LOGP, sampler=MU)
    loss_fn = make(ISPGMixin, ConstantNormMixin, loss_constant=4.0)
    loss, _ = loss_fn.policy_loss(b)
    loss.backward()
    w = torch.tensor([1.0, math.exp(-0.3)], **F64)
    a = torch.tensor([2.0, -1.0], **F64)
    torch.testing.assert_close(b.logprobs.grad, -(w * a)[:, None] * MASK / 8, atol=1e-12, rtol=1e-9)
    # the value: (2 + 4)/8 + (−w2·3)/8 = (6 − 2.222455)/8 = 0.472193
    assert loss.item() == pytest.approx((6 - 3 * math.exp(-0.3)) / 8, abs=1e-9)


def test_token_is_truncates_each_token_weight():
    # exp Δ = [[e^0.1 = 1.10517, e^−0.1 = 0.904837], [1, e^−0.5 = 0.606531, e^0.2 = 1.22140]]; C = 1.1
    # → w = [[1.1, 0.904837], [1, 0.606531, 1.1]], 2 of 5 tokens clipped
    per_token, stats = make(TokenISPGMixin, is_cap=1.1).objective(batch(LOGP, sampler=MU))
    e = math.exp
    expected = torch.tensor([[2.2, 4 * e(-0.1), 0.0], [-0.5, -1.5 * e(-0.5), -1.1]], **F64)  # −w·A·log π
    torch.testing.assert_close(per_token * MASK, expected, atol=1e-9, rtol=1e-7)
    assert stats["loss/is_weight_mean"] == pytest.approx((1.1 + e(-0.1) + 1 + e(-0.5) + 1.1) / 5, abs=1e-9)
    assert stats["mismatch/is_clip_frac"] == pytest.approx(0.4, abs=1e-12)


def test_token_is_gradient_is_minus_token_weight_times_advantage():
    b = batch(LOGP, sampler=MU)
    loss, _ = make(TokenISPGMixin).policy_loss(b)  # token mean over 5 tokens, C = ∞
    loss.backward()
    w = torch.tensor([[math.exp(0.1), math.exp(-0.1), 0.0], [1.0, math.exp(-0.5), math.exp(0.2)]], **F64)
    a = torch.tensor([[2.0], [-1.0]], **F64)
    torch.testing.assert_close(b.logprobs.grad, -w * a * MASK / 5, atol=1e-12, rtol=1e-9)


# log π_θ − log π_old: row 1 [0.3, −0.3, ·], row 2 [0.1, −0.5, 0]
OLD = [[-1.3, -1.7, 40.0], [-0.6, -1.0, -1.0]]


def test_clip_takes_the_pessimistic_branch():
    # A = [1, −1], ratio bounds [0.8, 1.2]
    # row 1 (A=1):  r = [1.349859, 0.740818]; −r = [−1.3499, −0.7408]; −clip(r) = [−1.2, −0.8]
    #               max → [−1.2 (clipped), −0.740818]
    # row 2 (A=−1): r = [1.105171, 0.606531, 1]; clip(r) = [1.105171, 0.8, 1] → max [1.105171, 0.8 (clipped), 1]
    b = batch(LOGP, old=OLD, advantages=(1.0, -1.0))
    per_token, stats = make(ClipMixin).objective(b)
    e = math.exp
    expected = torch.tensor([[-1.2, -e(-0.3), 0.0], [e(0.1), 0.8, 1.0]], **F64)
    torch.testing.assert_close(per_token * MASK, expected, atol=1e-9, rtol=1e-7)
    assert stats["loss/clip_frac"] == pytest.approx(2 / 5, abs=1e-12)
    assert stats["loss/ratio_mean"] == pytest.approx((e(0.3) + e(-0.3) + e(0.1) + e(-0.5) + 1) / 5, abs=1e-9)


def test_clip_gradient_vanishes_on_clipped_tokens():
    b = batch(LOGP, old=OLD, advantages=(1.0, -1.0))
    loss, _ = make(ClipMixin).policy_loss(b)
    loss.backward()
    # unclipped tokens: ∂(−A·r)/∂log π = −A·r, over 5 tokens; clipped tokens (0,0) and (1,1): 0
    e = math.exp
    expected = torch.tensor([[0.0, -e(-0.3), 0.0], [e(0.1), 0.0, 1.0]], **F64) / 5
    torch.testing.assert_close(b.logprobs.grad, expected, atol=1e-12, rtol=1e-9)


# GSPO: log π_θ − log π_old = row 1 [0.3, −0.1, ·] → s1 = e^{0.2/2} = e^0.1;  row 2 [0.3]*3 → s2 = e^0.3
GSPO_OLD = [[-1.3, -1.9, 40.0], [-0.8, -1.8, -1.3]]


def test_gspo_clips_the_sequence_ratio():
    # A = [1, 1], bounds [0.8, 1.2]: s1 = 1.105171 inside; s2 = 1.349859 clipped to 1.2
    b = batch(LOGP, old=GSPO_OLD, advantages=(1.0, 1.0))
    per_token, stats = make(GSPOMixin).objective(b)
    s1 = math.exp(0.1)
    expected = torch.tensor([[-s1, -s1, 0.0], [-1.2, -1.2, -1.2]], **F64)
    torch.testing.assert_close(per_token * MASK, expected, atol=1e-9, rtol=1e-7)
    assert stats["loss/clip_frac"] == 0.5
    assert stats["loss/seq_ratio_mean"] == pytest.approx((s1 + math.exp(0.3)) / 2, abs=1e-9)


def test_gspo_gradient_is_minus_a_s_over_the_denominator_or_zero_when_clipped():
    b = batch(LOGP, old=GSPO_OLD, advantages=(1.0, 1.0))
    loss, _ = make(GSPOMixin, SeqMeanMixin).policy_loss(b)
    loss.backward()
    # seq-mean: L = ½[(−s1 − s1)/2 + (−1.2·3)/3] = ½(−1.105171 − 1.2) = −1.152585
    s1 = math.exp(0.1)
    assert loss.item() == pytest.approx((-s1 - 1.2) / 2, abs=1e-9)
    # row 1 unclipped: −A·s1·m_t / (len 2 · N_seq 2);  row 2 clipped: 0
    expected = torch.tensor([[-s1 / 4, -s1 / 4, 0.0], [0.0, 0.0, 0.0]], **F64)
    torch.testing.assert_close(b.logprobs.grad, expected, atol=1e-12, rtol=1e-9)


def test_gspo_token_gradient_matches_sequence_level_gspo():
    # with seq-mean, GSPO-token's gradient equals that of −A·clip-max(s) with s = exp(mean Δ) differentiable
    b = batch(LOGP, old=GSPO_OLD, advantages=(1.0, -1.0))
    loss, _ = make(GSPOMixin, SeqMeanMixin, clip_low=0.5, clip_high=0.5).policy_loss(b)
    loss.backward()
    logp = b.logprobs.detach().clone().requires_grad_(True)
    s = (((logp - b.old_logprobs) * MASK).sum(-1) / MASK.sum(-1)).exp()
    a = b.advantages
    seq_loss = torch.maximum(-a * s, -a * s.clamp(0.5, 1.5)).mean()
    seq_loss.backward()
    torch.testing.assert_close(b.logprobs.grad, logp.grad, atol=1e-12, rtol=1e-9)
