"""Mismatch metrics on a hand-worked 2 × 3 example.

mask = [[1, 1, 0], [1, 0, 0]]
μ (sampler) = [[0.5, 0.25, ·], [0.2, ·, ·]];  π (trainer) = [[0.25, 0.25, ·], [0.4, ·, ·]]
Δ = log π − log μ = [−ln 2, 0, ln 2] on the three response tokens; ρ = [−ln 2, ln 2]; lengths [2, 1]
"""

import math
from pathlib import Path

import numpy as np
import pytest
import torch

from precision_oat.precision.mismatch_metrics import (
    POSITION_BUCKETS,
    PROB_BUCKETS,
    mismatch_breakdown,
    mismatch_histograms,
    mismatch_metrics,
)

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
        "mismatch/ratio_out_of_band": 2 / 3,  # π/μ = ½, 1, 2: two of three outside [0.9, 1.1]
    }
    assert set(m) == set(expected)
    for key, value in expected.items():
        assert type(m[key]) is float
        assert m[key] == pytest.approx(value, abs=1e-6, rel=1e-4), key


def test_ratio_band_is_closed_and_counts_only_response_tokens():
    # Δ = ln 0.95, ln 1.05 (inside), ln 0.85, ln 1.2 (outside); padding with π/μ = e^5 does not count
    ratios = torch.tensor([[0.95, 1.05, 0.85], [1.2, 0.0, 0.0]], dtype=torch.float64)
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])
    delta = torch.where(mask > 0, ratios.clamp(min=1e-9).log(), 5.0)
    sampler = torch.full_like(delta, -2.0)
    assert mismatch_metrics(sampler, sampler + delta, mask)["mismatch/ratio_out_of_band"] == pytest.approx(0.5)


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
    assert len(m) == 13 and all(v == 0.0 for v in m.values())


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


# --- mismatch_breakdown: where the mismatch lives ---


def _logs(mu: list[list[float]]) -> torch.Tensor:
    return torch.tensor(mu, dtype=torch.float64).log()


def test_tokens_land_in_the_bucket_of_their_sampler_probability():
    # row 0 is all response; row 1's response is columns 1–2, its padding would fill the empty
    # 0.5–0.9 bucket (μ = 0.7, Δ = 5) or poison every sum (log μ = −inf, log π = nan) if it leaked.
    # μ = 0.9 sits on an edge (exp(ln 0.9) rounds back to 0.9) and belongs to [0.9, 1].
    mask = torch.tensor([[1.0, 1.0, 1.0, 1.0], [0.0, 1.0, 1.0, 0.0]])
    mu = [[0.05, 0.2, 0.4, 0.9], [0.7, 0.3, 0.99, 1.0]]
    delta = torch.tensor([[0.1, -0.2, 0.4, -0.05], [5.0, 0.3, 0.01, 0.0]], dtype=torch.float64)
    sampler = _logs(mu)
    sampler[1, 3] = -math.inf
    trainer = sampler + delta
    trainer[1, 3] = math.nan
    m = mismatch_breakdown(sampler, trainer, mask)
    expected = {
        "mismatch/mu/0-0.1/abs_logp_diff_mean": 0.1,  # μ = 0.05
        "mismatch/mu/0-0.1/token_frac": 1 / 6,
        "mismatch/mu/0.1-0.5/abs_logp_diff_mean": 0.3,  # μ = 0.2, 0.4, 0.3: (0.2 + 0.4 + 0.3)/3
        "mismatch/mu/0.1-0.5/token_frac": 3 / 6,
        "mismatch/mu/0.9-1/abs_logp_diff_mean": 0.03,  # μ = 0.9, 0.99: (0.05 + 0.01)/2
        "mismatch/mu/0.9-1/token_frac": 2 / 6,
        # all six tokens sit at positions 0–3: (0.1 + 0.2 + 0.4 + 0.05 + 0.3 + 0.01)/6
        "mismatch/position/0-16/abs_logp_diff_mean": 1.06 / 6,
        # ρ = [0.1 − 0.2 + 0.4 − 0.05, 0.3 + 0.01] = [0.25, 0.31] at lengths [4, 2]: (0.25 − 0.31)/(4 − 2)
        "mismatch/seq_logratio_slope": -0.03,
        "mismatch/seq_abs_logratio_slope": -0.03,
    }
    assert set(m) == set(expected)  # the empty 0.5–0.9 bucket has no key, not a nan or a 0
    for key, value in expected.items():
        assert type(m[key]) is float
        assert m[key] == pytest.approx(value, abs=1e-12), key


def test_position_counts_from_the_first_response_token_of_each_row():
    # |Δ| is 0.1, 0.2, 0.4 per row, the sign alternating by column; padding holds Δ = 9.
    # row 0: columns 0–19  → positions 0–19: 16 tokens in [0, 16),  4 in [16, 64)
    # row 1: columns 50–79 → positions 0–29: 16 tokens in [0, 16), 14 in [16, 64)
    # row 2: columns 5–74  → positions 0–69: 16 tokens in [0, 16), 48 in [16, 64), 6 in [64, 256)
    columns = torch.arange(80)
    spans = [(0, 20), (50, 80), (5, 75)]
    mask = torch.stack([((columns >= a) & (columns < b)).double() for a, b in spans])
    size = torch.tensor([[0.1], [0.2], [0.4]], dtype=torch.float64)
    delta = torch.where(mask > 0, size * (-1.0) ** columns, 9.0)
    sampler = torch.full((3, 80), -0.5, dtype=torch.float64)
    m = mismatch_breakdown(sampler, sampler + delta, mask)
    positions = {k: v for k, v in m.items() if k.startswith("mismatch/position/")}
    assert set(positions) == {f"mismatch/position/{b}/abs_logp_diff_mean" for b in ("0-16", "16-64", "64-256")}
    assert positions["mismatch/position/0-16/abs_logp_diff_mean"] == pytest.approx(0.7 / 3, abs=1e-12)  # 16·0.7/48
    # (4·0.1 + 14·0.2 + 48·0.4)/66 = 22.4/66
    assert positions["mismatch/position/16-64/abs_logp_diff_mean"] == pytest.approx(22.4 / 66, abs=1e-12)
    assert positions["mismatch/position/64-256/abs_logp_diff_mean"] == pytest.approx(0.4, abs=1e-12)


def test_every_position_bucket_up_to_the_open_last_one():
    # one response of 1050 tokens starting at column 50 of 1100, Δ = 0.001·position:
    # the mean over [lo, hi) is 0.001·(lo + hi − 1)/2, and [1024, ∞) holds positions 1024–1049
    columns = torch.arange(1100)
    mask = (columns >= 50).double()[None]
    position = (columns - 50).clamp(min=0).double()
    sampler = torch.full((1, 1100), -2.0, dtype=torch.float64)
    m = mismatch_breakdown(sampler, sampler + 0.001 * position, mask)
    expected = {"0-16": 7.5, "16-64": 39.5, "64-256": 159.5, "256-1024": 639.5, "1024-inf": 1036.5}
    positions = {k: v for k, v in m.items() if k.startswith("mismatch/position/")}
    assert set(positions) == {f"mismatch/position/{b}/abs_logp_diff_mean" for b in expected}
    for bucket, value in expected.items():
        assert positions[f"mismatch/position/{bucket}/abs_logp_diff_mean"] == pytest.approx(1e-3 * value, abs=1e-12)
    assert len(POSITION_BUCKETS) == len(expected) + 1


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_slope_of_an_exactly_linear_sequence_log_ratio(sign):
    # every response token has Δ = ±0.01, so ρ = ±0.01·len and |ρ| = 0.01·len; responses start at
    # columns 0, 2, 5, 1 with lengths 3, 7, 10, 25
    columns = torch.arange(30)
    spans = [(0, 3), (2, 9), (5, 15), (1, 26)]
    mask = torch.stack([((columns >= a) & (columns < b)).double() for a, b in spans])
    sampler = -torch.rand(4, 30, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    m = mismatch_breakdown(sampler, sampler + sign * 0.01, mask)
    assert m["mismatch/seq_logratio_slope"] == pytest.approx(sign * 0.01, abs=1e-14)
    assert m["mismatch/seq_abs_logratio_slope"] == pytest.approx(0.01, abs=1e-14)
    assert m["mismatch/seq_logratio_slope"] == mismatch_metrics(sampler, sampler + sign * 0.01, mask)[
        "mismatch/seq_logratio_slope"
    ]


def test_slopes_are_zero_with_one_distinct_length_or_no_response():
    # both responses have 2 tokens (at different columns) and different ρ = 0.3, −0.3
    mask = torch.tensor([[1.0, 1.0, 0.0], [0.0, 1.0, 1.0]])
    sampler = torch.full((2, 3), -1.0)
    trainer = sampler + torch.tensor([[0.1, 0.2, 0.0], [0.0, -0.1, -0.2]])
    m = mismatch_breakdown(sampler, trainer, mask)
    assert m["mismatch/seq_logratio_slope"] == 0.0 and m["mismatch/seq_abs_logratio_slope"] == 0.0
    empty = mismatch_breakdown(sampler, trainer, torch.zeros(2, 3))
    assert empty == {"mismatch/seq_logratio_slope": 0.0, "mismatch/seq_abs_logratio_slope": 0.0}


def _reference_breakdown(sampler: torch.Tensor, trainer: torch.Tensor, mask: torch.Tensor) -> dict[str, float]:
    """A row-by-row, token-by-token rewrite in python floats, with the textbook slope formula."""
    sums: dict[str, list[float]] = {}
    lengths, rhos = [], []
    for log_mu_row, log_pi_row, mask_row in zip(sampler.tolist(), trainer.tolist(), mask.tolist()):
        position, rho = 0, 0.0
        for log_mu, log_pi, m in zip(log_mu_row, log_pi_row, mask_row):
            if m <= 0:
                continue
            d = log_pi - log_mu
            mu = math.exp(log_mu)
            mu_bucket = next(i for i in range(4) if i == 3 or mu < PROB_BUCKETS[i + 1])
            position_bucket = next(i for i in range(5) if position < POSITION_BUCKETS[i + 1])
            for key in (f"mu/{mu_bucket}", f"position/{position_bucket}"):
                sums.setdefault(key, [0.0, 0])
                sums[key][0] += abs(d)
                sums[key][1] += 1
            position, rho = position + 1, rho + d
        if position:
            lengths.append(position)
            rhos.append(rho)
    n = len(lengths)

    def slope(ys):
        sx, sy = sum(lengths), sum(ys)
        return (n * sum(x * y for x, y in zip(lengths, ys)) - sx * sy) / (n * sum(x * x for x in lengths) - sx * sx)

    out = {"mismatch/seq_logratio_slope": slope(rhos), "mismatch/seq_abs_logratio_slope": slope([abs(r) for r in rhos])}
    total = sum(count for key, (_, count) in sums.items() if key.startswith("mu/"))
    for key, (abs_sum, count) in sums.items():
        kind, i = key.split("/")
        edges = PROB_BUCKETS if kind == "mu" else POSITION_BUCKETS
        label = f"mismatch/{kind}/{edges[int(i)]:g}-{edges[int(i) + 1]:g}"
        out[f"{label}/abs_logp_diff_mean"] = abs_sum / count
        if kind == "mu":
            out[f"{label}/token_frac"] = count / total
    return out


def _random_rollout(dtype: torch.dtype):
    # 8 responses of 1–250 tokens starting at columns 0–49 of 300, μ spread over (0.001, 1)
    g = torch.Generator().manual_seed(3)
    starts = torch.randint(0, 50, (8, 1), generator=g)
    lengths = torch.randint(1, 251, (8, 1), generator=g)
    columns = torch.arange(300)
    mask = ((columns >= starts) & (columns < starts + lengths)).to(dtype)
    sampler = (0.001 + 0.999 * torch.rand(8, 300, generator=g, dtype=torch.float64)).log().to(dtype)
    trainer = sampler + (0.01 * torch.randn(8, 300, generator=g, dtype=torch.float64)).to(dtype)
    return sampler, trainer, mask


def test_fp32_inputs_match_a_float64_token_by_token_reference():
    # fp32 arithmetic carries ~1e-7 relative error (2^−24 per operation); float64 must hold 1e-12
    sampler, trainer, mask = _random_rollout(torch.float32)
    sampler.requires_grad_()
    m = mismatch_breakdown(sampler, trainer, mask)
    reference = _reference_breakdown(sampler.detach().double(), trainer.double(), mask.double())
    assert set(m) == set(reference)
    for key, value in reference.items():
        assert m[key] == pytest.approx(value, rel=1e-12, abs=1e-15), key
    assert m == mismatch_breakdown(sampler.detach().double(), trainer.double(), mask.double())


def test_every_breakdown_key_is_in_the_metrics_page():
    page = (Path(__file__).resolve().parents[1] / "docs" / "metrics.md").read_text()
    keys = set(mismatch_breakdown(*_random_rollout(torch.float64)))
    columns = torch.arange(1100)
    sampler = torch.tensor([0.05, 0.3, 0.7, 0.95], dtype=torch.float64).log().repeat(275)[None]
    keys |= set(mismatch_breakdown(sampler, sampler + 0.01, (columns >= 50).double()[None]))
    assert len(keys) == 2 + 2 * 4 + 5
    missing = sorted(k for k in keys if f"`{k}`" not in page)
    assert not missing, f"docs/metrics.md lacks {missing}"
