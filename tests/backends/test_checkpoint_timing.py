"""When checkpoints come: said at the start, every --save-every-minutes too, and a run that saved none is restarted with --overwrite."""

import json
import shutil

import pytest

from precision_oat.backends.local.driver import train
from precision_oat.errors import UserError
from precision_oat.runs.checkpoint import first_checkpoint
from tests.backends.helpers import make_args


def test_a_time_limit_below_a_steps_length_saves_every_step(tmp_path, embedded_policy_dir, capsys):
    out = tmp_path / "run"
    # 1e-6 minutes is 60 µs, shorter than any step: steps 1, 2 and 3 are saved though --save-every is 50.
    train(make_args(model=str(embedded_policy_dir), steps=3, save_every=50, save_every_minutes=1e-6,
                    keep_checkpoints=None, output_dir=str(out)))
    assert sorted(p.name for p in (out / "checkpoints").glob("step_*")) == [f"step_00000{s}" for s in (1, 2, 3)]
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert all(r["perf/time/save"] > 0 for r in rows)
    assert "first checkpoint: at step 3 (the last) or after 1e-06 minutes, if sooner" in capsys.readouterr().out


def test_the_start_line_names_the_first_checkpoint():
    assert first_checkpoint(0, 20, 50, 10.0) == ("first checkpoint: at step 20 (the last) or after 10 minutes, if "
                                                 "sooner; also on Ctrl-C/SIGTERM (--save-every 50, "
                                                 "--save-every-minutes 10.0)")
    # A resume from step 50 of a 120-step run saving every 50 steps: the next is step 100.
    assert first_checkpoint(50, 120, 50, None).startswith("first checkpoint: at step 100; ")
    assert first_checkpoint(0, 120, None, None).startswith("first checkpoint: at step 120 (the last); ")


def test_a_run_that_saved_no_checkpoint_points_to_overwrite_both_ways(tmp_path, embedded_policy_dir):
    out = tmp_path / "run"
    common = dict(model=str(embedded_policy_dir), steps=2, output_dir=str(out))
    train(make_args(**common))
    # What a run killed before its first save leaves: its rows, no checkpoint, no summary.
    shutil.rmtree(out / "checkpoints")
    (out / "summary.json").unlink()
    with pytest.raises(UserError, match=r"^--resume: the run in .* saved no checkpoint before it stopped, so it cannot "
                                        r"be continued; start it again with --overwrite"):
        train(make_args(**common, resume=True))
    with pytest.raises(UserError, match=r"already holds a run \(config.json, metrics.jsonl with 2 rows\) that saved no "
                                        r"checkpoint, so --resume cannot continue it; add --overwrite"):
        train(make_args(**common))
    train(make_args(**common, overwrite=True))
    assert (out / "checkpoints" / "step_000002").is_dir()
