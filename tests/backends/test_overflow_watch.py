"""A static loss scale that overflows is told once per excursion of skipped steps; a dynamic one says nothing."""

import json

import pytest

from precision_oat.backends.local.driver import train
from precision_oat.errors import UserError
from precision_oat.runs.overflow_watch import OverflowWatch
from tests.backends.helpers import make_args

WARNING = "warning: step "


def test_a_skipped_static_step_is_told_when_an_excursion_begins():
    watch = OverflowWatch(static=True)
    told = [(step, line) for step, skipped in enumerate([0.0, 1.0, 1.0, 0.0, 1.0], start=1)
            for line in watch.check({"train/skipped_this_step": skipped, "train/loss_scale": 1e10}, step)]
    assert [step for step, _ in told] == [2, 5]
    assert told[0][1].startswith("warning: step 2's gradients overflowed (inf/NaN) at the static loss scale 1e+10, ")


def test_dynamic_scaling_skips_silently():
    assert OverflowWatch(static=False).check({"train/skipped_this_step": 1.0, "train/loss_scale": 65536.0}, 1) == []


def test_a_static_scale_too_large_for_the_gradients_warns_once_not_at_every_step(tmp_path, embedded_policy_dir,
                                                                                  capsys):
    out = tmp_path / "run"
    # The embedded policy's fp16 gradients overflow at 1e10 at every step: the run's end refuses it too.
    with pytest.raises(UserError, match="every optimiser step of the run overflowed"):
        train(make_args(model=str(embedded_policy_dir), dtype="fp16", loss_scaling="static", initial_loss_scale=1e10,
                        steps=4, output_dir=str(out)))
    skipped = [json.loads(line)["train/skipped_this_step"] for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert skipped == [1.0] * 4
    said = [line for line in capsys.readouterr().out.splitlines() if line.startswith(WARNING)]
    assert len(said) == 1 and said[0].startswith("warning: step 1's gradients overflowed")
    assert said[0].endswith("a static scale never shrinks: lower --initial-loss-scale, or use --loss-scaling dynamic "
                            "(once per excursion)")


def test_a_static_scale_that_fits_says_nothing(tmp_path, embedded_policy_dir, capsys):
    out = tmp_path / "run"
    train(make_args(model=str(embedded_policy_dir), dtype="fp16", loss_scaling="static", initial_loss_scale=1.0,
                    steps=2, output_dir=str(out)))
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert not any(r["train/skipped_this_step"] for r in rows)
    assert WARNING not in capsys.readouterr().out
