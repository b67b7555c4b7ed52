"""The math workload runs end to end on the local backend with a tiny offline model."""

import json
import math

from precision_oat.backends.local.driver import train
from tests.backends.helpers import make_args


def test_math_run_samples_grades_evaluates_and_logs(tmp_path, byte_model_dir):
    args = make_args(
        model=str(byte_model_dir), task="math", prompt_template="qwen_math", max_train=4, prompts_per_step=2,
        num_samples=2, max_new_tokens=8, max_prompt_length=4096, steps=1, eval_every=1,
        eval_benchmarks=("aime", "amc"), eval_limit=2, eval_samples=2, output_dir=str(tmp_path),
    )
    summary = train(args)
    row = json.loads((tmp_path / "metrics.jsonl").read_text().splitlines()[0])
    # A random byte-level model writes no boxed answer: reward 0, but every stage ran.
    assert row["reward/mean"] == 0.0
    # Random bytes rarely hit the stop token: most responses run to the 8-token limit, none past it.
    assert row["response/truncated_frac"] >= 0.5 and row["response/length_max"] <= 8
    for key in ("eval/aime/avg@2", "eval/amc/pass@2", "eval/average/avg@2", "mismatch/k3", "loss/policy"):
        assert math.isfinite(row[key]), key
    assert summary["steps"] == 1
