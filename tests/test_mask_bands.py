"""The bands the lab reports for IcePop and the geometric mask, against values worked by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest

from precision_oat.lab.mask_bands import central_band, describe, kept, mask_bands


def test_the_central_band_cuts_one_percent_from_each_tail():
    assert central_band(np.linspace(0.0, 1.0, 101)) == pytest.approx((0.01, 0.99))
    assert central_band(np.array([2.0, 4.0]), held=0.5) == pytest.approx((2.5, 3.5))  # quantiles 0.25 and 0.75


def test_a_value_on_the_band_edge_is_kept_as_both_masks_keep_it():
    assert kept(np.array([0.5, 1.0, 5.0, 5.5]), 0.5, 5.0) == 0.75


def test_the_bands_of_hand_made_tokens_and_answers():
    # Four tokens with π/μ 0.4, 1, 1, 6 (IcePop's [0.5, 5] keeps the middle two); two answers: one of 5 tokens at
    # ρ = 0 (g = 1), one of 10 tokens at ρ = −1 (g = e^−0.1 ≈ 0.905, outside [0.99, 1.01]).
    histograms = {
        "mismatch/token_logp_diff": np.log([0.4, 1.0, 1.0, 6.0]),
        "mismatch/seq_logratio": np.array([0.0, -1.0]),
        "mismatch/seq_length": np.array([5.0, 10.0]),
    }
    bands = mask_bands(histograms)
    assert bands["band/icepop_default_kept"] == 0.5
    assert bands["band/geo_mask_default_kept"] == 0.5
    # Quantiles 0.01 and 0.99 of (0.4, 1, 1, 6): 0.4 + 0.03·0.6 and 1 + 0.97·5.
    assert bands["band/token_ratio_low"] == pytest.approx(0.418)
    assert bands["band/token_ratio_high"] == pytest.approx(5.85)
    # Of (e^−0.1, 1): e^−0.1 + 0.01·(1 − e^−0.1) and e^−0.1 + 0.99·(1 − e^−0.1).
    g = math.exp(-0.1)
    assert bands["band/geo_ratio_low"] == pytest.approx(g + 0.01 * (1 - g))
    assert bands["band/geo_ratio_high"] == pytest.approx(g + 0.99 * (1 - g))
    # The flags round outward, and the answers' band, all below 1, widens to hold it.
    assert describe(bands) == [
        "tokens: 98% have π/μ in [0.418, 5.85]; IcePop's default [0.5, 5] keeps 50.0% "
        "(to keep 98%: --icepop-low 0.418 --icepop-high 5.85)",
        "answers: 98% have a geometric-mean π/μ in [0.9058, 0.999]; the geometric mask's default [0.99, 1.01] keeps "
        "50.0% (to keep 98%: --geo-mask-low 0.905 --geo-mask-high 1)"]


def test_no_response_token_gives_no_bands():
    empty = np.array([])
    assert mask_bands({"mismatch/token_logp_diff": empty, "mismatch/seq_logratio": empty,
                       "mismatch/seq_length": empty}) == {}


def test_the_flags_it_gives_are_a_band_the_command_line_takes():
    from precision_oat.presets import parse_args

    # An FP8-like pair: every answer's g below 1, so the band the lab gives must widen to hold 1.
    bands = mask_bands({"mismatch/token_logp_diff": np.log([0.7, 0.9, 0.95, 1.2]),
                        "mismatch/seq_logratio": np.array([-30.0, -20.0, -5.0]),
                        "mismatch/seq_length": np.array([1000.0, 800.0, 400.0])})
    assert bands["band/geo_ratio_high"] < 1.0
    geo_flags = describe(bands)[1].split("(to keep 98%: ")[1].rstrip(")").split()
    args = parse_args(["--algo", "grpo-geo-mask", *geo_flags])
    assert args.algorithm.geo_mask_low <= bands["band/geo_ratio_low"] and args.algorithm.geo_mask_high == 1.0
