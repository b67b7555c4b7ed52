"""One tiny CPU run of ``python -m precision_oat.main`` with each rollout correction and with bypass mode.

The runs start at once (torch's import dominates their time), each one step of 4 prompts × 4
samples on the embedded policy.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

FAST = ["--steps", "1", "--prompts-per-step", "4", "--num-samples", "4", "--max-new-tokens", "4",
        "--wandb-mode", "disabled", "--probe-dtypes", "--output-dir", "run"]
# name → (flags, a key the run must log)
RUNS = {
    "icepop": (["--algo", "grpo-icepop"], "mismatch/icepop_mask_frac"),
    "geo-mask": (["--algo", "grpo-geo-mask"], "mismatch/geo_mask_seq_frac"),
    "divergence-mask": (["--algo", "grpo-divergence-mask", "--divergence-measure", "k2", "--divergence-level",
                         "token", "--divergence-threshold", "0.05"], "mismatch/divergence_mask_frac"),
    "bypass-mode": (["--algo", "grpo", "--bypass-mode"], "loss/clip_frac"),
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """name → (returncode, stderr, the first metrics line) of every run, run concurrently."""
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    started = {}
    for name, (flags, _) in RUNS.items():
        cwd = tmp_path_factory.mktemp(name)
        started[name] = (subprocess.Popen([sys.executable, "-m", "precision_oat.main", *flags, *FAST], cwd=cwd,
                                          env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE), cwd)
    results = {}
    for name, (proc, cwd) in started.items():
        _, err = proc.communicate(timeout=180)
        metrics = cwd / "run" / "metrics.jsonl"
        results[name] = (proc.returncode, err, json.loads(metrics.read_text().splitlines()[0]) if metrics.exists() else {})
    return results


@pytest.mark.parametrize("name", list(RUNS))
def test_a_one_step_run_completes_and_logs_its_statistic(runs, name):
    code, err, row = runs[name]
    assert code == 0, err
    key = RUNS[name][1]
    assert row["step"] == 1 and 0.0 <= row[key] <= 1.0, (key, row.get(key))


def test_bypass_mode_skips_the_scoring_pass_that_the_other_runs_make(tmp_path, embedded_policy_dir, monkeypatch):
    # The command line in this process, with the learner's scoring pass recorded (and run): bypass mode makes none,
    # the other runs one over the step's 16 responses.
    from precision_oat.main import cli
    from precision_oat.rl.step import RLStep

    scored, score = [], RLStep.score
    monkeypatch.setattr(RLStep, "score", lambda self, rollout: scored.append(rollout.num_sequences) or score(self, rollout))
    passes = {}
    for name in ("bypass-mode", "icepop"):
        scored.clear()
        flags = [*RUNS[name][0], *FAST[:-1], str(tmp_path / name), "--model", str(embedded_policy_dir)]
        cli(flags)
        passes[name] = list(scored)
    assert passes == {"bypass-mode": [], "icepop": [16]}
