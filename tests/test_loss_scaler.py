"""LossScaler follows DeepSpeed 0.16.8's DynamicLossScaler (consecutive_hysteresis=False), traced by hand.

DeepSpeed's rule, per optimiser step:
    overflow: skip the step; if the hysteresis budget is 1, multiply the scale by the backoff
              (not below the floor), else spend one unit of the budget. A shrink does not
              refill the budget.
    clean:    after ``growth_interval`` consecutive clean steps, multiply the scale by the
              growth factor and refill the budget.
"""

from __future__ import annotations

import pytest

from precision_oat.precision.loss_scaler import LossScaler
from precision_oat.precision.policy import LossScaling


def _trace(scaler: LossScaler, overflows: list[bool]) -> list[tuple[bool, float]]:
    """(skipped, scale after the step) for each step."""
    return [(scaler.update(overflow), scaler.scale) for overflow in overflows]


def test_hysteresis_two_keeps_the_scale_on_the_first_overflow_and_halves_it_on_the_second():
    scaler = LossScaler(LossScaling("dynamic", initial_scale=2.0**16, hysteresis=2))
    assert scaler.scale == 65536.0
    assert _trace(scaler, [True, True]) == [(True, 65536.0), (True, 32768.0)]
    assert scaler.skipped_steps == 2


def test_a_shrink_does_not_refill_the_hysteresis_budget():
    # DeepSpeed: once the budget is down to 1, every further overflow halves the scale
    # (65536 → 65536 → 32768 → 16384 → 8192) until a growth refills it.
    scaler = LossScaler(LossScaling("dynamic", initial_scale=2.0**16, hysteresis=2))
    scales = [scale for _, scale in _trace(scaler, [True, True, True, True])]
    assert scales == [65536.0, 32768.0, 16384.0, 8192.0]


def test_growth_refills_the_hysteresis_budget():
    # interval 3: overflow (budget 2 → 1), overflow (halve: 32768), three clean steps
    # (double: 65536, budget back to 2), overflow (kept), overflow (halved).
    scaler = LossScaler(LossScaling("dynamic", initial_scale=2.0**16, growth_interval=3, hysteresis=2))
    trace = _trace(scaler, [True, True, False, False, False, True, True])
    assert trace == [
        (True, 65536.0), (True, 32768.0),
        (False, 32768.0), (False, 32768.0), (False, 65536.0),
        (True, 65536.0), (True, 32768.0),
    ]


def test_scale_grows_after_each_growth_interval_of_clean_steps():
    scaler = LossScaler(LossScaling("dynamic", initial_scale=8.0, growth_interval=3, growth_factor=2.0))
    scales = [scale for _, scale in _trace(scaler, [False] * 7)]
    # Grows on the 3rd and the 6th clean step.
    assert scales == [8.0, 8.0, 16.0, 16.0, 16.0, 32.0, 32.0]
    assert scaler.skipped_steps == 0


def test_an_overflow_restarts_the_growth_count():
    # clean, clean, overflow (budget spent, scale kept), then growth needs 3 fresh clean steps.
    scaler = LossScaler(LossScaling("dynamic", initial_scale=8.0, growth_interval=3, hysteresis=2))
    trace = _trace(scaler, [False, False, True, False, False, False])
    assert [scale for _, scale in trace] == [8.0, 8.0, 8.0, 8.0, 8.0, 16.0]
    assert [skipped for skipped, _ in trace] == [False, False, True, False, False, False]


def test_backoff_and_growth_factors_are_the_configured_ones():
    scaler = LossScaler(LossScaling("dynamic", initial_scale=64.0, growth_interval=2, growth_factor=4.0,
                                    backoff_factor=0.25, hysteresis=1))
    # Overflow: 64·0.25 = 16; two clean steps: 16·4 = 64.
    assert [scale for _, scale in _trace(scaler, [True, False, False])] == [16.0, 16.0, 64.0]


def test_scale_never_drops_below_min_scale():
    scaler = LossScaler(LossScaling("dynamic", initial_scale=4.0, hysteresis=1, min_scale=2.0))
    assert [scale for _, scale in _trace(scaler, [True, True, True])] == [2.0, 2.0, 2.0]
    assert scaler.skipped_steps == 3


def test_static_scaling_never_changes_the_scale_but_still_skips_overflowing_steps():
    scaler = LossScaler(LossScaling("static", initial_scale=1024.0, growth_interval=2, hysteresis=1))
    trace = _trace(scaler, [False, False, False, True, True, False, False])
    assert [scale for _, scale in trace] == [1024.0] * 7
    assert [skipped for skipped, _ in trace] == [False, False, False, True, True, False, False]
    assert scaler.skipped_steps == 2


def test_no_scaling_keeps_scale_one_whatever_the_initial_scale():
    scaler = LossScaler(LossScaling("none", initial_scale=2.0**16))
    assert scaler.scale == 1.0
    assert _trace(scaler, [False, True]) == [(False, 1.0), (True, 1.0)]


@pytest.mark.parametrize("prefix", [[], [True], [False, False], [True, False, True]])
def test_state_dict_round_trip_continues_identically(prefix):
    config = LossScaling("dynamic", initial_scale=2.0**10, growth_interval=3, hysteresis=2)
    original = LossScaler(config)
    _trace(original, prefix)
    restored = LossScaler(config)
    restored.load_state_dict(original.state_dict())
    assert restored.state_dict() == original.state_dict()
    # The hysteresis budget and the clean-step count travel too: both continue the same way.
    rest = [True, False, False, True, True, False, False, False]
    assert _trace(restored, rest) == _trace(original, rest)
    assert restored.skipped_steps == original.skipped_steps == prefix.count(True) + rest.count(True)
