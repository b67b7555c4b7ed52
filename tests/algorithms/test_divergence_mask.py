"""Divergence filter: tokens or responses dropped where k1/k2/k3 of π_old vs μ exceeds τ.

mask = [[1, 1, 1, 0], [1, 1, 0, 0]]; Δ_t = log π_old − log μ:
  row 0: [ln 2, 0, −ln 2]      k1 = [−0.6931, 0, 0.6931]   k2 = [0.2402, 0, 0.2402]   k3 = [0.3069, 0, 0.1931]
  row 1: [ln 1.1, ln 1.1]      k1 = −0.0953 each            k2 = 0.004542 each          k3 = 0.004690 each
with k2 = ½Δ² (½·ln²2 = 0.240227), k3 = e^Δ − 1 − Δ (2 − 1 − ln 2 = 0.306853; ½ − 1 + ln 2 = 0.193147;
1.1 − 1 − ln 1.1 = 0.004690). Per row: sum k3 = [0.5, 0.009380], mean k3 = [0.1667, 0.004690],
sum k1 = [0, −0.1906], max k2 = [0.2402, 0.004542]. 5 response tokens, 3 in row 0.
"""

import math

import pytest
import torch

from precision_oat.algorithms import DivergenceMaskMixin, resolve
from tests.algorithms.corrections_case import correction_batch, correction_loss

F64 = dict(dtype=torch.float64)
MASK = torch.tensor([[1.0, 1.0, 1.0, 0.0], [1.0, 1.0, 0.0, 0.0]], **F64)
LN2, LN11 = math.log(2.0), math.log(1.1)
DELTA = torch.tensor([[LN2, 0.0, -LN2, 60.0], [LN11, LN11, 60.0, 60.0]], **F64)
SAMPLER = torch.full((2, 4), -2.0, **F64)
OLD = SAMPLER + DELTA  # the 60s sit on padding: e^60 must not reach any value


def make(**constants):
    return correction_loss(DivergenceMaskMixin, "divergence-mask", **constants)


def batch(logprobs_shift=0.0):
    return correction_batch(OLD, SAMPLER, MASK, logprobs_shift)


ROW0, ROW1, BOTH = [[0.0], [1.0]], [[1.0], [0.0]], [[1.0], [1.0]]
CASES = [
    # measure, level, τ, kept (per token, or per row), token share, sequence share
    ("k3", "token", 0.25, [[0, 1, 1, 1], [1, 1, 1, 1]], 1 / 5, 1 / 2),  # 0.3069 > 0.25
    ("k1", "token", 0.5, [[0, 1, 0, 1], [1, 1, 1, 1]], 2 / 5, 1 / 2),  # |±0.6931| > 0.5
    ("k2", "token", 0.2, [[0, 1, 0, 1], [1, 1, 1, 1]], 2 / 5, 1 / 2),  # 0.2402 > 0.2
    ("k1", "seq-sum", 0.1, ROW1, 2 / 5, 1 / 2),  # row 0's k1 cancel to 0; |−0.1906| > 0.1
    ("k3", "seq-sum", 0.4, ROW0, 3 / 5, 1 / 2),  # 0.5 > 0.4
    ("k3", "seq-mean", 0.1, ROW0, 3 / 5, 1 / 2),  # 0.1667 > 0.1
    ("k3", "seq-mean", 0.2, BOTH, 0.0, 0.0),  # 0.1667 ≤ 0.2
    ("k2", "seq-max", 0.2, ROW0, 3 / 5, 1 / 2),  # 0.2402 > 0.2
    ("k3", "seq-max", 0.31, BOTH, 0.0, 0.0),  # 0.3069 ≤ 0.31
]


@pytest.mark.parametrize("measure, level, threshold, kept, token_share, seq_share", CASES,
                         ids=[f"{m}-{lv}-{t}" for m, lv, t, *_ in CASES])
def test_each_measure_and_level_drops_what_the_hand_computed_values_exceed(measure, level, threshold, kept,
                                                                           token_share, seq_share):
    weight, stats = make(divergence_measure=measure, divergence_level=level,
                         divergence_threshold=threshold).correction(batch())
    torch.testing.assert_close(weight, torch.tensor(kept, **F64), atol=0, rtol=0)
    assert stats["mismatch/divergence_mask_frac"] == pytest.approx(token_share, abs=1e-12)
    assert stats["mismatch/divergence_mask_seq_frac"] == pytest.approx(seq_share, abs=1e-12)


def test_the_default_is_verls_k3_preset_the_sequence_mean_of_k3_up_to_0_01():
    spec = resolve("grpo-divergence-mask", max_gen_length=8)
    assert (spec.divergence_measure, spec.divergence_level, spec.divergence_threshold) == ("k3", "seq-mean", 0.01)
    loss = make()
    loss.algo = spec
    weight, stats = loss.correction(batch())
    # mean k3 = [0.1667, 0.004690]: row 0 dropped
    torch.testing.assert_close(weight, torch.tensor(ROW0, **F64), atol=0, rtol=0)
    assert stats["mismatch/divergence_mask_frac"] == pytest.approx(3 / 5, abs=1e-12)


def test_the_mask_reads_pi_old_not_pi_theta_and_is_detached():
    same, _ = make().correction(batch(0.0))
    moved, _ = make().correction(batch(0.9))
    assert torch.equal(same, moved) and not same.requires_grad


def test_k1_has_no_seq_max_and_bad_settings_name_their_flag():
    with pytest.raises(ValueError, match="--divergence-measure k1 --divergence-level seq-max"):
        resolve("grpo-divergence-mask", divergence_measure="k1", divergence_level="seq-max", max_gen_length=8)
    with pytest.raises(ValueError, match="--divergence-measure k4: unknown; valid names: k1, k2, k3"):
        resolve("grpo-divergence-mask", divergence_measure="k4", max_gen_length=8)
    with pytest.raises(ValueError, match="--divergence-level"):
        resolve("grpo-divergence-mask", divergence_level="seq-median", max_gen_length=8)
    with pytest.raises(ValueError, match="--divergence-threshold"):
        resolve("grpo-divergence-mask", divergence_threshold=0.0, max_gen_length=8)
