"""LossScaler follows the pinned DeepSpeed 0.19.8's DynamicLossScaler (consecutive_hysteresis=False).

DeepSpeed 0.19.8's rule, per optimiser step, with c the clean steps since the last overflow
(or since the start), this one included:
    overflow: skip the step; if the hysteresis budget is 1, multiply the scale by the backoff
              (not below the floor), else spend one unit of the budget. A shrink does not
              refill the budget.
    clean:    when c − 1 is a positive multiple of ``growth_interval`` (c = N + 1, 2N + 1, …),
              multiply the scale by the growth factor and refill the budget.
So the first growth after an overflow or the start comes on the (N + 1)-th clean step, the
later ones every N. (DeepSpeed 0.16.8, the Oat backend's, grows at c = N, 2N, …: one step sooner.)
The hand-traced tests below pin the rule; the last ones replay random overflow traces through the
installed DeepSpeed's own scaler.
"""

from __future__ import annotations

import random

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
    # Once the budget is down to 1, every further overflow halves the scale
    # (65536 → 65536 → 32768 → 16384 → 8192) until a growth refills it.
    scaler = LossScaler(LossScaling("dynamic", initial_scale=2.0**16, hysteresis=2))
    scales = [scale for _, scale in _trace(scaler, [True, True, True, True])]
    assert scales == [65536.0, 32768.0, 16384.0, 8192.0]


def test_growth_refills_the_hysteresis_budget():
    # interval 3: overflow (budget 2 → 1), overflow (halve: 32768), four clean steps (c = 1…4;
    # c − 1 = 3 doubles on the fourth: 65536, budget back to 2), overflow (kept), overflow (halved).
    scaler = LossScaler(LossScaling("dynamic", initial_scale=2.0**16, growth_interval=3, hysteresis=2))
    trace = _trace(scaler, [True, True, False, False, False, False, True, True])
    assert trace == [
        (True, 65536.0), (True, 32768.0),
        (False, 32768.0), (False, 32768.0), (False, 32768.0), (False, 65536.0),
        (True, 65536.0), (True, 32768.0),
    ]


def test_scale_first_grows_one_step_after_the_interval_then_every_interval():
    scaler = LossScaler(LossScaling("dynamic", initial_scale=8.0, growth_interval=3, growth_factor=2.0))
    scales = [scale for _, scale in _trace(scaler, [False] * 8)]
    # c − 1 = 3 on the 4th clean step, 6 on the 7th: 8, 8, 8, 16, 16, 16, 32, 32.
    assert scales == [8.0, 8.0, 8.0, 16.0, 16.0, 16.0, 32.0, 32.0]
    assert scaler.skipped_steps == 0


def test_an_overflow_restarts_the_growth_count():
    # clean, clean, overflow (budget spent, scale kept), then growth needs 4 fresh clean steps.
    scaler = LossScaler(LossScaling("dynamic", initial_scale=8.0, growth_interval=3, hysteresis=2))
    trace = _trace(scaler, [False, False, True, False, False, False, False])
    assert [scale for _, scale in trace] == [8.0, 8.0, 8.0, 8.0, 8.0, 8.0, 16.0]
    assert [skipped for skipped, _ in trace] == [False, False, True, False, False, False, False]


def test_backoff_and_growth_factors_are_the_configured_ones():
    scaler = LossScaler(LossScaling("dynamic", initial_scale=64.0, growth_interval=2, growth_factor=4.0,
                                    backoff_factor=0.25, hysteresis=1))
    # Overflow: 64·0.25 = 16; three clean steps (c − 1 = 2 on the third): 16·4 = 64.
    assert [scale for _, scale in _trace(scaler, [True, False, False, False])] == [16.0, 16.0, 16.0, 64.0]


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
    rest = [True, False, False, True, True, False, False, False, False]
    assert _trace(restored, rest) == _trace(original, rest)
    assert restored.skipped_steps == original.skipped_steps == prefix.count(True) + rest.count(True)


# --- against the installed DeepSpeed's own scaler ---


def _deepspeed_scales(overflows: list[bool], *, initial: float, window: int, hysteresis: int, floor: float,
                      stop_at_floor: bool = False) -> list[float]:
    """The scale after each step of DeepSpeed's DynamicLossScaler, as its ZeRO optimisers build it."""
    loss_scaler = pytest.importorskip("deepspeed.runtime.fp16.loss_scaler")
    import torch

    from precision_oat.learners.deepspeed_config import ensure_process_group

    ensure_process_group(torch.device("cpu"))  # its overflow message asks for this process's rank
    scaler = loss_scaler.DynamicLossScaler(init_scale=initial, scale_window=window, min_scale=floor,
                                           delayed_shift=hysteresis, consecutive_hysteresis=False,
                                           raise_error_at_min_scale=stop_at_floor)
    scales = []
    for overflow in overflows:
        scaler.update_scale(overflow)
        scales.append(scaler.cur_scale)
    return scales


def test_random_overflow_traces_give_deepspeeds_scales_step_for_step():
    rng = random.Random(0)
    for _ in range(300):
        window, hysteresis = rng.randint(1, 6), rng.randint(1, 4)
        initial = 2.0 ** rng.randint(2, 16)
        # A floor the trace can reach: halvings of the initial scale.
        floor = initial / 2.0 ** rng.randint(0, 4)
        overflow_rate = rng.choice([0.1, 0.3, 0.5, 0.8])
        overflows = [rng.random() < overflow_rate for _ in range(rng.randint(1, 60))]
        ours = LossScaler(LossScaling("dynamic", initial_scale=initial, growth_interval=window, hysteresis=hysteresis,
                                      min_scale=floor))
        expected = _deepspeed_scales(overflows, initial=initial, window=window, hysteresis=hysteresis, floor=floor)
        trace = _trace(ours, overflows)
        case = (window, hysteresis, initial, floor, overflows)
        assert [scale for _, scale in trace] == expected, case
        assert [skipped for skipped, _ in trace] == overflows, case


def test_deepspeeds_engine_stops_where_ours_keeps_skipping_at_the_floor():
    # DeepSpeed's ZeRO optimisers keep raise_error_at_min_scale=True: the overflow that would shrink a scale
    # already at the floor raises. Ours keeps the floor and skips (docs/concepts.md#loss-scaling).
    # 4 → 2 (the floor) on the first overflow (hysteresis 1); the second overflow finds it there.
    flags = dict(initial=4.0, window=3, hysteresis=1, floor=2.0)
    with pytest.raises(Exception, match="already at minimum"):
        _deepspeed_scales([True, True], stop_at_floor=True, **flags)
    ours = LossScaler(LossScaling("dynamic", initial_scale=4.0, growth_interval=3, hysteresis=1, min_scale=2.0))
    assert _trace(ours, [True, True]) == [(True, 2.0), (True, 2.0)]
