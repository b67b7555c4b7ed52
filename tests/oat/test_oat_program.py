"""End to end: ``python -m precision_oat.main --backend oat`` on CPU, two RL steps.

Oat's real program under launchpad (local multiprocessing): a Plasma IPC server, one
``OatActor`` with the built-in sampler and one ``OatLearner`` on DeepSpeed, with
Oat's weight broadcast (gloo) between them. Each run takes about 25 s on 2 cores.
"""

import json
import math

import torch

from tests.oat.cli import run_cli

MISMATCH = ["mismatch/k1", "mismatch/k3", "mismatch/abs_logp_diff_mean", "mismatch/seq_logratio_std"]


def train(tmp_path, dtype: str, *extra: str) -> list[dict]:
    result = run_cli(
        # 64 samples per step: enough that some group has mixed rewards (the policy adds correctly ~10% of the time).
        "--dtype", dtype, "--algo", "grpo-tis", "--steps", "2", "--prompts-per-step", "8", "--num-samples", "8",
        "--max-new-tokens", "4", "--micro-batch-size", "16", "--learning-rate", "1e-3",
        "--output-dir", str(tmp_path), "--wandb-mode", "disabled", *extra,
    )
    assert result.returncode == 0, result.stdout[-4000:]
    return [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]


def final_weights(tmp_path) -> dict:
    from transformers import AutoModelForCausalLM

    (saved,) = tmp_path.glob("oat/*/saved_models/step_*")
    return AutoModelForCausalLM.from_pretrained(saved).state_dict()


def test_two_steps_in_fp32_keep_sampler_and_learner_in_sync(tmp_path):
    rows = train(tmp_path, "fp32")

    assert [r["step"] for r in rows] == [1, 2]
    for row in rows:
        for key in ["reward/mean", "loss/policy", "train/grad_norm", *MISMATCH]:
            assert math.isfinite(row[key]), key
        assert row["train/loss_scale"] == 1.0
    assert max(r["train/grad_norm"] for r in rows) > 0, rows
    # Step 2 samples with the weights step 1 produced. If Oat's broadcast had not reached the
    # built-in sampler, μ would come from the old weights (lr 1e-3 moves log-probs by ~1e-2).
    assert rows[1]["mismatch/abs_logp_diff_mean"] < 1e-5

    from transformers import AutoModelForCausalLM

    start = AutoModelForCausalLM.from_pretrained(tmp_path / "initial_model").state_dict()
    end = final_weights(tmp_path)
    assert any(not torch.equal(start[k], end[k].to(start[k].dtype)) for k in start)
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["steps"] == 2


def test_two_steps_in_bf16_with_evaluation(tmp_path):
    all_rows = train(tmp_path, "bf16", "--eval-every", "2")
    rows = [r for r in all_rows if "loss/policy" in r]

    assert [r["step"] for r in rows] == [1, 2]
    # Oat evaluates before training and then every 2 steps, once per benchmark of the task.
    # The same keys as the local backend: one sample per held-out question, so avg@1.
    evals = [r for r in all_rows if "eval/addition/avg@1" in r]
    assert [r["step"] for r in evals] == [0, 2]
    assert all(0.0 <= r["eval/addition/avg@1"] <= 1.0 and r["eval/addition/response_length"] > 0 for r in evals)
    # Addition's reward is its exactness.
    assert all(r["eval/addition/reward"] == r["eval/addition/avg@1"] and 0.0 <= r["eval/addition/truncated_frac"] <= 1.0
               for r in evals)
    for row in rows:
        for key in ["reward/mean", "loss/policy", "train/grad_norm", *MISMATCH]:
            assert math.isfinite(row[key]), key
    # bf16 sampler (KV cache) vs bf16 trainer (full forward): a real, non-zero gap.
    assert all(r["mismatch/abs_logp_diff_mean"] > 1e-4 for r in rows)
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["backend"] == "oat" and config["dtype"] == "bf16"


def test_lora_pushes_the_merged_weights_to_the_built_in_sampler(tmp_path):
    # Oat merges the adapters for its broadcast and sends the model's state_dict, a tied head under both its names.
    rows = train(tmp_path, "fp32", "--lora-rank", "4", "--learning-rate", "1e-2")

    assert [r["step"] for r in rows] == [1, 2]
    assert rows[0]["train/grad_norm"] > 0
    # Step 2 samples with step 1's merged weights: in fp32 the two sides agree to rounding.
    assert rows[1]["mismatch/abs_logp_diff_mean"] < 1e-5
    contract = json.loads((tmp_path / "config.json").read_text())["precision_contract"]
    assert "into the base's compute weights, in the trainer dtype" in contract["lora"]
