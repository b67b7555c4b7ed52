"""experiments/h200/arms_report.py on arms written by hand: the best 10-step mean, the range of sequence
weights and the held-out reward column."""

import json

import pytest

from tests.conftest import load_script

report = load_script("experiments/h200/arms_report.py")


def write_arm(folder, rewards, evals):
    """An arm's metrics.jsonl: one training row per reward (step 1, 2, …) and the evaluation rows ``evals``."""
    rows = [{"step": i, "time/elapsed_s": 2.0 * i, "reward/mean": r, "loss/is_weight_mean": 1 + (i % 3 - 1) / 10}
            for i, r in enumerate(rewards, start=1)]
    folder.mkdir(parents=True)
    (folder / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in rows + evals))


def test_an_arm_that_never_reaches_the_threshold_shows_how_far_it_got(tmp_path):
    write_arm(tmp_path / "pg-bf16-s0", [0.1] * 5 + [0.5] * 10 + [0.2] * 10, [])
    [stats] = [report.arm_stats(rows) for rows in report.load_arms([tmp_path]).values()]
    assert stats["first_step"] is None
    assert stats["best"] == (0.5, 6)  # steps 6–15
    assert stats["weights"] == (0.9, 1.1)
    assert "| – | 0.50 (6) |" in report.table(report.load_arms([tmp_path]))[2]


def test_the_held_out_reward_gets_a_column_once_an_arm_logs_it(tmp_path):
    write_arm(tmp_path / "pg-fp16-s0", [0.5] * 12, [{"step": 10, "eval/counting/avg@4": 0.0,
                                                     "eval/counting/reward": 0.375}])
    write_arm(tmp_path / "pg-bf16-s0", [0.5] * 12, [{"step": 10, "eval/counting/avg@4": 0.25}])
    header, rule, bf16, fp16 = report.table(report.load_arms([tmp_path]))
    assert "| held-out at steps 10 | held-out reward at steps 10 |" in header
    assert rule.count("|---") == header.count(" | ") + 1
    assert "| 0.00 | 0.38 | 0 / 1 |" in fp16 and "| 0.25 | – | 0 / 1 |" in bf16
    # Arms that never logged it keep the old table.
    (tmp_path / "pg-fp16-s0" / "metrics.jsonl").unlink()
    assert "held-out reward" not in report.table(report.load_arms([tmp_path]))[0]


def test_two_folders_holding_an_arm_of_the_same_name_are_refused_by_name(tmp_path):
    write_arm(tmp_path / "first" / "pg-bf16-s0", [0.5] * 12, [])
    write_arm(tmp_path / "second" / "pg-bf16-s0", [0.1] * 12, [])
    with pytest.raises(SystemExit, match="both hold an arm named pg-bf16-s0; rename one of them"):
        report.load_arms([tmp_path / "first", tmp_path / "second"])


def test_an_arm_named_without_a_seed_is_seed_0_of_the_curve_its_other_seeds_join(tmp_path):
    write_arm(tmp_path / "pg-fp16-long", [0.5] * 12, [])
    write_arm(tmp_path / "pg-fp16-long-s1", [0.4] * 12, [])
    write_arm(tmp_path / "pg-bf16-long", [0.1] * 12, [])
    groups = {g.label: g.seeds for g in report.arm_groups(report.load_arms([tmp_path]))}
    assert sorted(groups.values()) == [[0], [0, 1]]
