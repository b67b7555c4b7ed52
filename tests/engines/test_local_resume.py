"""Checkpoints: a run stopped at step k and resumed ends where an uninterrupted run ends."""

import json

import torch
from transformers import AutoModelForCausalLM

from precision_oat.engines.local.checkpoint import latest_checkpoint
from precision_oat.engines.local.loop import train
from tests.engines.helpers import make_args


def rows(folder):
    return [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]


def test_resume_reaches_the_same_state(tmp_path, embedded_policy_dir):
    common = dict(model=str(embedded_policy_dir), algo="grpo", dtype="fp16", learning_rate=5e-3)
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    train(make_args(**common, steps=4, output_dir=str(straight)))
    train(make_args(**common, steps=2, output_dir=str(resumed)))
    assert latest_checkpoint(resumed).name == "step_000002"
    train(make_args(**common, steps=4, output_dir=str(resumed), resume=True))

    a, b = rows(straight), rows(resumed)
    assert [r["step"] for r in b] == [1, 2, 3, 4]
    for ra, rb in zip(a, b):
        assert ra["reward/mean"] == rb["reward/mean"]
        assert abs(ra["loss/policy"] - rb["loss/policy"]) < 1e-6
        assert ra["train/loss_scale"] == rb["train/loss_scale"]
    final_a = AutoModelForCausalLM.from_pretrained(latest_checkpoint(straight)).state_dict()
    final_b = AutoModelForCausalLM.from_pretrained(latest_checkpoint(resumed)).state_dict()
    for name in final_a:
        torch.testing.assert_close(final_a[name], final_b[name], atol=1e-6, rtol=1e-5)
    state = torch.load(latest_checkpoint(resumed) / "trainer_state.pt", weights_only=False)
    assert state["step"] == 4 and set(state["rng"]) == {"torch", "python", "numpy"}
