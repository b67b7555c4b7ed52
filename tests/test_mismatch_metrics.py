"""Mismatch metrics on a hand-worked 2 × 3 example.

mask = [[1, 1, 0], [1, 0, 0]]
μ (sampler) = [[0.5, 0.25, ·], [0.2, ·, ·]];  π (trainer) = [[0.25, 0.25, ·], [0.4, ·, ·]]
Δ = log π − log μ = [−ln 2, 0, ln 2] on the three response tokens; ρ = [−ln 2, ln 2]; lengths [2, 1]
"""

import math

import numpy as np
import pytest
import torch

from precision_oat.mismatch import mismatch_histograms, mismatch_metrics

LN2 = math.log(2.0)
MASK = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
# padding holds values that would dominate every statistic if it leaked in
SAMPLER = torch.tensor([[math.log(0.5), math.log(0.25), 0.0], [math.log(0.2), -30.0, 0.0]])
TRAINER = torch.tensor([[math.log(0.25), math.log(0.25), -40.0], [math.log(0.4), 0.0, -2.0]])


def test_hand_computed_metrics():
    m = mismatch_metrics(SAMPLER, TRAINER, MASK)
    expected = {
        "mismatch/k1": 0.0,  # mean(ln 2, 0, −ln 2)
        "mismatch/k2": 0.5 * (2 * LN2**2) / 3,  # ½·(0.480453·2)/3 = 0.160151
        # (e^Δ − 1 − Δ): ½ − 1 + ln 2 = 0.193147;  0;  2 − 1 − ln 2 = 0.306853;  sum ½ → mean 1/6
        "mismatch/k3": 0.5 / 3,
        "mismatch/abs_logp_diff_mean": 2 * LN2 / 3,
        "mismatch/abs_logp_diff_max": LN2,
        "mismatch/prob_diff_max": 0.25,  # μ − π = [0.25, 0, −0.2]
        "mismatch/prob_diff_min": -0.2,
        "mismatch/seq_logratio_mean": 0.0,
        "mismatch/seq_logratio_std": LN2,  # population std of [−ln 2, ln 2]
        "mismatch/seq_logratio_abs_max": LN2,
        "mismatch/seq_logratio_slope": -2 * LN2,  # (ln 2 − (−ln 2)) / (1 − 2)
        "mismatch/seq_kl": 0.25,  # mean(0.193147 + 0, 0.306853)
    }
    assert set(m) == set(expected)
    for key, value in expected.items():
        assert type(m[key]) is float
        assert m[key] == pytest.approx(value, abs=1e-6, rel=1e-4), key


def test_a_row_without_response_tokens_changes_nothing():
    pad = torch.zeros(1, 3)
    m = mismatch_metrics(torch.cat([SAMPLER, pad - 5]), torch.cat([TRAINER, pad]), torch.cat([MASK, pad]))
    assert m == mismatch_metrics(SAMPLER, TRAINER, MASK)


def test_slope_of_the_sequence_log_ratio_against_length():
    # lengths 1..4, first token Δ = 0.6 and every further token 0.5, so ρ = 0.5·L + 0.1: slope 0.5
    lengths = torch.tensor([1, 2, 3, 4])
    mask = (torch.arange(4)[None] < lengths[:, None]).double()
    delta = torch.full((4, 4), 0.5, dtype=torch.float64)
    delta[:, 0] = 0.6
    sampler = torch.full((4, 4), -1.0, dtype=torch.float64)
    m = mismatch_metrics(sampler, sampler + delta, mask)
    assert m["mismatch/seq_logratio_slope"] == pytest.approx(0.5, abs=1e-12)
    assert m["mismatch/seq_logratio_mean"] == pytest.approx(0.5 * 2.5 + 0.1, abs=1e-12)


def test_slope_is_zero_when_all_lengths_are_equal():
    sampler = torch.tensor([[-1.0, -2.0], [-0.5, -0.1]])
    m = mismatch_metrics(sampler, sampler + torch.tensor([[0.1, 0.2], [-0.3, 0.0]]), torch.ones(2, 2))
    assert m["mismatch/seq_logratio_slope"] == 0.0


def test_equal_logprobs_give_zero_mismatch():
    logp = -torch.rand(3, 5, generator=torch.Generator().manual_seed(0))
    mask = torch.tensor([[1.0] * 5, [1.0] * 3 + [0.0] * 2, [1.0] + [0.0] * 4])
    assert all(v == 0.0 for v in mismatch_metrics(logp, logp.clone(), mask).values())


def test_empty_mask_gives_zeros():
    m = mismatch_metrics(torch.zeros(2, 3), torch.ones(2, 3), torch.zeros(2, 3))
    assert len(m) == 12 and all(v == 0.0 for v in m.values())


def test_metrics_are_computed_in_float64_and_detached():
    # fp16 inputs, Δ = −2^−10 (one fp16 ulp at 1): k3 = e^Δ − 1 − Δ ≈ Δ²/2 + Δ³/6 = 4.7606e-7,
    # which fp16 arithmetic would round to 0 or to a multiple of 2^−11
    sampler = torch.tensor([[-1.0]], dtype=torch.float16, requires_grad=True)
    trainer = torch.tensor([[-1.0 - 2**-10]], dtype=torch.float16)
    d = -(2**-10)
    m = mismatch_metrics(sampler, trainer, torch.ones(1, 1))
    assert m["mismatch/k3"] == pytest.approx(math.exp(d) - 1 - d, rel=1e-6)
    assert m["mismatch/k1"] == 2**-10


def test_histograms_return_raw_arrays():
    h = mismatch_histograms(SAMPLER, TRAINER, MASK)
    assert all(isinstance(v, np.ndarray) and v.ndim == 1 for v in h.values())
    np.testing.assert_allclose(h["mismatch/token_logp_diff"], [-LN2, 0.0, LN2], atol=1e-6)
    np.testing.assert_allclose(h["mismatch/seq_logratio"], [-LN2, LN2], atol=1e-6)
    np.testing.assert_array_equal(h["mismatch/seq_length"], [2, 1])
    np.testing.assert_allclose(h["mismatch/sampler_prob"], [0.5, 0.25, 0.2], atol=1e-6)
    np.testing.assert_allclose(h["mismatch/trainer_prob"], [0.25, 0.25, 0.4], atol=1e-6)
