"""A correction that drops most of a step's batch is told once per excursion, naming the flags of its band."""

import json

from precision_oat.backends.local.driver import train
from precision_oat.runs.mask_watch import MaskWatch
from tests.backends.helpers import make_args


def test_a_starving_mask_is_told_when_it_begins_and_again_only_after_it_recovered():
    watch = MaskWatch()
    told = []
    for step, share in enumerate([0.1, 0.9, 1.0, 0.2, 0.6], start=1):
        told += [(step, line) for line in watch.check({"mismatch/geo_mask_frac": share,
                                                       "mismatch/geo_mask_seq_frac": share,
                                                       "phantom/geo_mask_frac": share}, step)]
    assert [step for step, _ in told] == [2, 5]
    assert told[0][1].startswith("warning: the correction dropped 90% of step 2's batch (mismatch/geo_mask_frac): ")
    assert ("widen it (--geo-mask-low/--geo-mask-high; the mismatch lab on this sampler–trainer pair prints a band "
            "that keeps 98% of its answers)") in told[0][1]


def test_a_share_at_the_threshold_is_not_starving():
    assert MaskWatch().check({"mismatch/icepop_mask_frac": 0.5}, 1) == []


def test_a_bf16_run_whose_geometric_band_is_narrower_than_its_gap_warns_once(tmp_path, embedded_policy_dir, capsys):
    out = tmp_path / "run"
    # The embedded policy's bf16 pair differs by ~1e-2 per token: a band of ±1e-6 around 1 keeps no answer.
    train(make_args(model=str(embedded_policy_dir), dtype="bf16", algo="grpo-geo-mask", geo_mask_low=1 - 1e-6,
                    geo_mask_high=1 + 1e-6, steps=3, output_dir=str(out)))
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert all(r["mismatch/geo_mask_frac"] > 0.5 for r in rows)
    said = capsys.readouterr().out
    assert said.count("warning: the correction dropped") == 1
    assert f"dropped {rows[0]['mismatch/geo_mask_frac']:.0%} of step 1's batch (mismatch/geo_mask_frac)" in said


def test_a_run_whose_mask_keeps_most_of_the_batch_says_nothing(tmp_path, embedded_policy_dir, capsys):
    out = tmp_path / "run"
    train(make_args(model=str(embedded_policy_dir), dtype="fp16", algo="grpo-geo-mask", output_dir=str(out)))
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert all(r["mismatch/geo_mask_frac"] <= 0.5 for r in rows)
    assert "warning: the correction dropped" not in capsys.readouterr().out
