"""A signal ends a run at the next step boundary; with several ranks its line says what a dead rank means."""

from __future__ import annotations

import signal

import pytest

from precision_oat.runs.signals import StopRequest


@pytest.mark.parametrize("ranks", [1, 2])
def test_a_sigterm_asks_for_a_stop_after_the_step_and_with_several_ranks_names_the_way_back(ranks, capsys):
    before = signal.getsignal(signal.SIGTERM)
    with StopRequest(ranks) as stop:
        signal.raise_signal(signal.SIGTERM)
        assert stop.requested == "SIGTERM"
    line = capsys.readouterr().out.strip()
    assert line.startswith("SIGTERM: stopping after this step (again to stop now)")
    # Under torchrun the agent also sends SIGTERM when another rank has died: the step then never ends.
    assert ("--resume then goes on from the last checkpoint" in line) == (ranks > 1)
    assert signal.getsignal(signal.SIGTERM) is before


def test_a_second_signal_stops_at_once():
    # Python's own SIGINT handler before the block (a process started in the background may ignore SIGINT).
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            with StopRequest() as stop:
                signal.raise_signal(signal.SIGINT)
                assert stop.requested == "SIGINT"
                signal.raise_signal(signal.SIGINT)
    finally:
        signal.signal(signal.SIGINT, previous)
