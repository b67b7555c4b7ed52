"""Geometric sequence mask: a response kept (weight 1) while exp(mean_t log π_old/μ) lies in [lo, hi].

mask = [[1, 1, 0], [1, 1, 1], [1, 0, 0], [0, 0, 0]]; token log-ratios Δ_t = log π_old − log μ:
  row 0: [0.02, −0.01] → mean 0.005  → g = e^0.005  ≈ 1.0050   kept
  row 1: [0.03, 0.03, 0.03] → 0.03   → g = e^0.03   ≈ 1.0305   above 1.01, dropped
  row 2: [−0.005]                    → g = e^−0.005 ≈ 0.9950   kept
  row 3: no response token           → g = e^0 = 1             kept
"""

import math

import pytest
import torch

from precision_oat.algorithms import GeoMaskMixin, resolve
from tests.algorithms.corrections_case import correction_batch, correction_loss

F64 = dict(dtype=torch.float64)
MASK = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0], [1.0, 0.0, 0.0], [0.0, 0.0, 0.0]], **F64)
DELTA = torch.tensor([[0.02, -0.01, 40.0], [0.03, 0.03, 0.03], [-0.005, 40.0, 40.0], [40.0, 40.0, 40.0]], **F64)
SAMPLER = torch.full((4, 3), -1.0, **F64)
OLD = SAMPLER + DELTA  # the 40s sit on padding, where they must not count


def make(**constants):
    return correction_loss(GeoMaskMixin, "geo-mask", **constants)


def batch(old=OLD, logprobs_shift=0.0):
    return correction_batch(old, SAMPLER, MASK, logprobs_shift)


def test_default_band_drops_the_response_whose_geometric_mean_ratio_exceeds_1_01():
    weight, stats = make().correction(batch())
    torch.testing.assert_close(weight, torch.tensor([[1.0], [0.0], [1.0], [1.0]], **F64), atol=0, rtol=0)
    # token share: row 1's 3 of the 6 response tokens; sequence share: 1 of 4 responses
    assert stats["mismatch/geo_mask_frac"] == pytest.approx(3 / 6, abs=1e-12)
    assert stats["mismatch/geo_mask_seq_frac"] == pytest.approx(1 / 4, abs=1e-12)


def test_a_band_tighter_below_drops_the_response_under_it_too():
    weight, stats = make(geo_mask_low=0.999, geo_mask_high=1.04).correction(batch())
    # [0.999, 1.04]: row 1 (1.0305) now kept, row 2 (0.9950) below 0.999 dropped
    torch.testing.assert_close(weight, torch.tensor([[1.0], [1.0], [0.0], [1.0]], **F64), atol=0, rtol=0)
    assert stats["mismatch/geo_mask_frac"] == pytest.approx(1 / 6, abs=1e-12)
    assert stats["mismatch/geo_mask_seq_frac"] == pytest.approx(1 / 4, abs=1e-12)


def test_the_mean_not_the_sum_decides_so_length_alone_does_not_drop_a_response():
    # 3 tokens of Δ = 0.008 each: exp ρ = e^0.024 ≈ 1.024 leaves the band, g = e^0.008 ≈ 1.008 does not
    old = SAMPLER.clone()
    old[1] += 0.008
    weight, _ = make().correction(batch(old))
    assert weight[1, 0] == 1.0 and math.exp(0.024) > 1.01


def test_the_mask_is_zero_or_one_reads_pi_old_and_is_detached():
    same, _ = make().correction(batch())
    moved, _ = make().correction(batch(logprobs_shift=0.5))
    assert torch.equal(same, moved) and not same.requires_grad
    assert set(same.flatten().tolist()) == {0.0, 1.0}


def test_the_recipe_and_its_band_flags_resolve():
    spec = resolve("grpo-geo-mask", max_gen_length=8)
    assert (spec.correction, spec.geo_mask_low, spec.geo_mask_high) == ("geo-mask", 0.99, 1.01)
    with pytest.raises(ValueError, match="--geo-mask-low 1.001 --geo-mask-high 1.01"):
        resolve("grpo-geo-mask", geo_mask_low=1.001, max_gen_length=8)
