"""End to end on the embedded policy, on the cases that carry risk: each objective family in fp16
(the dtype with loss scaling), the other dtypes on two recipes, and LoRA in a half dtype (fp32
LoRA: test_local_lora.py). Every recipe's update runs in fp16 in test_local_learner.py."""

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM

from precision_oat.backends.local.driver import train
from tests.backends.helpers import make_args

REQUIRED = ["step", "reward/mean", "mismatch/k1", "mismatch/k3", "mismatch/abs_logp_diff_mean",
            "mismatch/seq_logratio_std", "train/loss_scale", "train/skipped_steps", "loss/policy", "train/grad_norm"]


# pg: one sequence-level IS weight; grpo-tis: clip × a correction; gspo: the sequence-ratio clip
# with its own advantage and reduction.
CASES = sorted({*((algo, "fp16", 0) for algo in ("pg", "grpo-tis", "gspo")),
                ("pg", "bf16", 0), ("grpo-tis", "fp32", 0), ("pg", "fp16", 4)})


@pytest.mark.parametrize("algo,dtype,lora_rank", CASES, ids=[f"{a}-{d}-{'lora' if r else 'full'}" for a, d, r in CASES])
def test_recipe_trains(tmp_path, embedded_policy_dir, algo, dtype, lora_rank):
    args = make_args(model=str(embedded_policy_dir), algo=algo, dtype=dtype, lora_rank=lora_rank,
                     learning_rate=1e-2 if lora_rank else 2e-3, output_dir=str(tmp_path))
    summary = train(args)

    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]
    for row in rows:
        for key in REQUIRED:
            # A step whose every optimiser step overflowed (fp16) has no finite gradient norm.
            if key == "train/grad_norm" and row["train/skipped_this_step"] > 0:
                continue
            assert isinstance(row[key], (int, float)) and math.isfinite(row[key]), (key, row.get(key))
        # fp16 starts at 2^16 and may halve after overflows (hysteresis 2); other dtypes are unscaled.
        assert (1.0 <= row["train/loss_scale"] <= 65536.0) if dtype == "fp16" else row["train/loss_scale"] == 1.0
    assert summary["steps"] == 2

    before = AutoModelForCausalLM.from_pretrained(embedded_policy_dir).state_dict()
    after = AutoModelForCausalLM.from_pretrained(tmp_path / "checkpoints" / "step_000002").state_dict()
    changed = [k for k in before if not torch.equal(before[k], after[k])]
    assert changed, "no weight changed"
    if lora_rank:
        # Merged LoRA only touches the adapted projections.
        assert all(k.endswith("proj.weight") for k in changed)


def test_steps_zero_is_a_standalone_evaluation(tmp_path, embedded_policy_dir):
    summary = train(make_args(model=str(embedded_policy_dir), steps=0, eval_samples=4, output_dir=str(tmp_path)))
    # The warmed-up policy adds correctly part of the time: avg@4 strictly between 0 and 1.
    assert 0.0 < summary["eval/addition/avg@4"] < 1.0
    assert summary["eval/addition/pass@4"] >= summary["eval/addition/avg@4"]
    # Addition's reward is its exactness, and every answer stopped before the limit.
    assert summary["eval/addition/reward"] == summary["eval/addition/avg@4"]
    assert summary["eval/addition/truncated_frac"] == 0.0
    assert not (tmp_path / "checkpoints").exists()


def test_an_evaluation_cut_at_its_limit_reports_its_answers_truncated(tmp_path, embedded_policy_dir):
    summary = train(make_args(model=str(embedded_policy_dir), steps=0, eval_samples=4, eval_max_new_tokens=1,
                              output_dir=str(tmp_path)))
    assert summary["eval/addition/response_length"] == 1.0
    # Only an answer whose first token is the stop token is whole.
    assert 0.99 < summary["eval/addition/truncated_frac"] <= 1.0


def test_offline_wandb_writes_a_local_run(tmp_path, embedded_policy_dir):
    pytest.importorskip("wandb")
    train(make_args(model=str(embedded_policy_dir), steps=1, wandb_mode="offline", output_dir=str(tmp_path)))
    assert list((tmp_path / "wandb").glob("offline-run-*"))


def test_final_probe_reports_bf16_above_fp16_and_names_the_pair_it_measured(tmp_path, embedded_policy_dir, capsys):
    summary = train(make_args(model=str(embedded_policy_dir), steps=1, probe_dtypes=["bf16", "fp16", "fp32"],
                              top_p=0.9, output_dir=str(tmp_path)))
    probe = json.loads((tmp_path / "mismatch_probe.json").read_text())
    assert probe == summary["probe"]
    # Not the run's top-p 0.9: the probe's own pair, named in the file and on the console.
    assert probe["measured"] == {"sampler": "builtin", "trainer": "hf", "top_p": 1.0, "temperature": 1.0,
                                 "prompts": 32, "samples_per_prompt": 4, "max_new_tokens": 4}
    assert probe["dtypes"]["bf16"]["sequences"] == 32 * 4
    assert "(builtin sampler vs hf trainer at top-p 1, 32 prompts × 4)" in capsys.readouterr().out
    assert probe["ratios"]["abs_logp_diff_mean"] > 3
    assert probe["dtypes"]["fp32"]["mismatch/abs_logp_diff_mean"] < 1e-5


def test_every_second_between_two_step_records_belongs_to_one_part_of_the_later_one(tmp_path, embedded_policy_dir):
    # A checkpoint at every step and offline wandb (histograms), so that saving and logging take real time.
    pytest.importorskip("wandb")
    summary = train(make_args(model=str(embedded_policy_dir), algo="pg", dtype="fp32", steps=4, save_every=1,
                              wandb_mode="offline", output_dir=str(tmp_path)))
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    parts = ["sample", "score", "update", "sync", "reward", "save", "log", "other"]
    for previous, row in zip(rows, rows[1:]):
        times = [row[f"perf/time/{part}"] for part in parts]
        assert all(t >= 0.0 for t in times), times
        assert row["perf/time/save"] > 0 and row["perf/time/log"] > 0, times
        # The wall time between two records; each elapsed_s is rounded to 1 ms.
        assert sum(times) == pytest.approx(row["time/elapsed_s"] - previous["time/elapsed_s"], abs=1.5e-3), times
    # The first record's parts start with the loop, after the run's set-up.
    assert sum(rows[0][f"perf/time/{part}"] for part in parts) <= rows[0]["time/elapsed_s"] + 1e-3
    split = summary["step_time"]
    assert list(split) == parts
    assert sum(t["share"] for t in split.values()) == pytest.approx(1.0)
    assert split["save"]["mean_s"] == pytest.approx(sum(r["perf/time/save"] for r in rows) / 4)


def test_profile_update_writes_where_that_steps_update_spent_its_time(tmp_path, embedded_policy_dir, capsys):
    train(make_args(model=str(embedded_policy_dir), algo="pg", dtype="fp32", output_dir=str(tmp_path), steps=3,
                     profile_update=2))
    profile = json.loads((tmp_path / "profile.json").read_text())
    assert profile["step"] == 2
    names = [name for name, calls, ms, share in profile["operators"]]
    assert {"aten::mm", "aten::addmm", "aten::bmm", "aten::linear"} & set(names)
    assert all(calls >= 1 and ms >= 0 for _, calls, ms, _ in profile["operators"])
    assert 0 < sum(share for *_, share in profile["operators"]) <= 1.0001
    assert 0 < profile["profiled_device_ms"] <= profile["profiled_wall_ms"]
    assert {name for name, _, _ in profile["host_operators"]} & {"aten::mm", "aten::addmm", "aten::bmm", "aten::linear"}
    assert f"profile of step 2's update ({tmp_path / 'profile.json'})" in capsys.readouterr().out
    # The profiled step is marked, and the run's time split is that of the other steps.
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if r.get("perf/profiled")] == [2]
    unprofiled = [r for r in rows if r["step"] != 2]
    split = json.loads((tmp_path / "summary.json").read_text())["step_time"]
    assert split["other"]["mean_s"] == pytest.approx(sum(r["perf/time/other"] for r in unprofiled) / len(unprofiled))


def test_a_builtin_cpu_run_prints_no_deepspeed_notice_and_no_progress_bar(tmp_path, embedded_policy_dir):
    # A fresh process: DeepSpeed warns once per process, at its first import (by save_pretrained).
    script = ("from precision_oat.backends.local.driver import train\n"
              "from tests.backends.helpers import make_args\n"
              f"train(make_args(model={str(embedded_policy_dir)!r}, dtype='bf16', output_dir={str(tmp_path)!r}))\n")
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "-c", script], cwd=root, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(root)})
    assert done.returncode == 0, done.stderr
    output = done.stdout + done.stderr
    assert (tmp_path / "checkpoints" / "step_000002").is_dir()
    assert "Setting accelerator" not in output
    # tqdm draws a bar as "NN%|…|" and redraws it with a carriage return.
    assert "%|" not in output and "\r" not in output, output
