"""--mismatch-alarm: a real bf16 run whose mismatch is past the threshold stops at step 1 with a checkpoint."""

import json

import pytest

from precision_oat.backends.local.driver import train
from precision_oat.errors import UserError
from precision_oat.presets import parse_args
from precision_oat.runs.alarms import ALARM_EXIT_STATUS, ALARM_KEYS, Alarm, AlarmWatch, parse_alarms
from precision_oat.runs.checkpoint import latest_checkpoint
from tests.backends.helpers import make_args

# The embedded policy's bf16 pair measures |Δlogp| ~1e-2 per token: 1e-3 is crossed at once.
ALARM = "mismatch/abs_logp_diff_mean>1e-3"


def rows(folder):
    return [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]


def test_a_stop_alarm_saves_a_checkpoint_and_stops_at_the_step_that_crossed(tmp_path, embedded_policy_dir, capsys):
    out = tmp_path / "run"
    common = dict(model=str(embedded_policy_dir), dtype="bf16", steps=3, output_dir=str(out), mismatch_alarm=[ALARM])
    with pytest.raises(SystemExit) as stopped:
        train(make_args(**common, mismatch_alarm_action="stop"))
    assert stopped.value.code == ALARM_EXIT_STATUS
    first = rows(out)
    assert [r["step"] for r in first] == [1] and latest_checkpoint(out).name == "step_000001"
    assert first[0]["mismatch/abs_logp_diff_mean"] > 1e-3 and first[0]["alarm/mismatch/abs_logp_diff_mean"] == 1.0
    said = capsys.readouterr().out
    value = f"{first[0]['mismatch/abs_logp_diff_mean']:.4g}"
    assert (f"mismatch alarm mismatch/abs_logp_diff_mean>0.001: {value} at step 1: stopped after saving a checkpoint "
            "at step 1; continue with the same command and --resume") in said
    # Every key an alarm may watch is one this run logged.
    assert set(ALARM_KEYS) <= first[0].keys()

    # Resumed with a warning instead: it runs to the end, and the excursion the stop announced lasts steps 1-3, so
    # nothing more is said.
    train(make_args(**common, resume=True))
    resumed = rows(out)
    assert [r["step"] for r in resumed] == [1, 2, 3]
    assert all(r["alarm/mismatch/abs_logp_diff_mean"] == 1.0 for r in resumed)
    assert "warning: mismatch alarm" not in capsys.readouterr().out


def test_a_resumed_run_warns_where_a_straight_run_does(tmp_path, embedded_policy_dir, capsys):
    common = dict(model=str(embedded_policy_dir), dtype="bf16", mismatch_alarm=[ALARM])

    def warnings() -> list[str]:
        return [line for line in capsys.readouterr().out.splitlines() if line.startswith("warning: mismatch alarm")]

    train(make_args(**common, steps=3, output_dir=str(tmp_path / "straight")))
    straight = warnings()
    # One excursion over the three steps: one line, at step 1.
    assert len(straight) == 1 and straight[0].endswith("at step 1 (once per excursion)"), straight
    train(make_args(**common, steps=1, output_dir=str(tmp_path / "resumed")))
    train(make_args(**common, steps=3, output_dir=str(tmp_path / "resumed"), resume=True))
    assert warnings() == straight


def test_a_warning_comes_once_per_excursion():
    watch = AlarmWatch([Alarm("mismatch/k3", True, 1.0)])
    started, marks = [], []
    for step, value in enumerate([0.5, 2.0, 3.0, 0.5, 4.0, 1.0], start=1):
        metrics = {"mismatch/k3": value}
        if watch.check(metrics):
            started.append(step)
        marks.append(metrics["alarm/mismatch/k3"])
    # Above 1 at steps 2-3 and 5 (1.0 itself is not above): two excursions, two warnings.
    assert started == [2, 5] and marks == [0.0, 1.0, 1.0, 0.0, 1.0, 0.0]


def test_a_nan_is_past_every_threshold():
    # A step that blew up logs NaN: the alarm that watches for a blow-up must not stay quiet then.
    watch = AlarmWatch(parse_alarms(["mismatch/k3>1e-3", "reward/mean<0.1"]))
    metrics = {"mismatch/k3": float("nan"), "reward/mean": float("nan")}
    assert [str(a) for a in watch.check(metrics)] == ["mismatch/k3>0.001", "reward/mean<0.1"]
    assert metrics["alarm/mismatch/k3"] == metrics["alarm/reward/mean"] == 1.0


def test_a_band_on_one_key_marks_it_while_either_end_is_crossed():
    watch = AlarmWatch(parse_alarms(["reward/mean<0.2", "reward/mean>0.8"]))
    marks = []
    for value in (0.1, 0.5, 0.9):
        metrics = {"reward/mean": value}
        watch.check(metrics)
        marks.append(metrics["alarm/reward/mean"])
    assert marks == [1.0, 0.0, 1.0]


def test_an_unknown_key_is_refused_before_the_run_folder_exists(tmp_path):
    out = tmp_path / "run"
    with pytest.raises(UserError, match=r"^--mismatch-alarm 'ratio/seq_std>5': no step logs ratio/seq_std; did you "
                                        r"mean mismatch/seq_logratio_std"):
        train(make_args(output_dir=str(out), mismatch_alarm=["ratio/seq_std>5"]))
    assert not out.exists()


def test_an_alarm_without_a_comparison_is_refused_in_one_line(capsys):
    with pytest.raises(SystemExit) as refused:
        parse_args(["--mismatch-alarm", "mismatch/k3=1e-3"])
    assert refused.value.code == ("error: --mismatch-alarm mismatch/k3=1e-3: must be KEY>VALUE or KEY<VALUE with a "
                                  "number, e.g. mismatch/k3>1e-3")


def test_the_flag_repeats():
    args = parse_args(["--mismatch-alarm", "mismatch/k3>1e-3", "--mismatch-alarm", "reward/mean<0.1"])
    assert args.log.mismatch_alarm == ("mismatch/k3>1e-3", "reward/mean<0.1")


def test_runs_md_lists_every_key_an_alarm_may_watch():
    from pathlib import Path

    page = (Path(__file__).resolve().parents[2] / "docs" / "runs.md").read_text()
    section = page[page.index("## Mismatch alarms"):page.index("## Resume")]
    assert [k for k in ALARM_KEYS if f"`{k}`" not in section] == []


def test_a_stop_alarm_stops_at_the_first_step_past_a_threshold_set_between_steps(tmp_path, embedded_policy_dir):
    common = dict(model=str(embedded_policy_dir), dtype="bf16", steps=4)
    train(make_args(**common, output_dir=str(tmp_path / "watched")))
    values = [r["mismatch/abs_logp_diff_mean"] for r in rows(tmp_path / "watched")]
    # A threshold between step 1's value and the farthest later one, on the side the later ones went: step 1 stays
    # inside, a later step crosses (the same seed samples the same rollouts).
    later = max(values[1:]) if max(values[1:]) > values[0] else min(values[1:])
    op = ">" if later > values[0] else "<"
    threshold = (values[0] + later) / 2
    expected = next(i for i, v in enumerate(values, start=1) if (v > threshold if op == ">" else v < threshold))
    assert expected > 1
    out = tmp_path / "stopped"
    with pytest.raises(SystemExit) as stopped:
        train(make_args(**common, output_dir=str(out), mismatch_alarm_action="stop",
                        mismatch_alarm=[f"mismatch/abs_logp_diff_mean{op}{threshold!r}"]))
    assert stopped.value.code == ALARM_EXIT_STATUS
    assert [r["step"] for r in rows(out)] == list(range(1, expected + 1))
    assert [r["alarm/mismatch/abs_logp_diff_mean"] for r in rows(out)] == [0.0] * (expected - 1) + [1.0]
    assert latest_checkpoint(out).name == f"step_{expected:06d}"
