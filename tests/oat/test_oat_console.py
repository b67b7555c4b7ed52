"""What ``--backend oat`` prints: the local backend's lines on the console, Oat's own output in OUTPUT_DIR/oat.log.

A real three-step run on CPU (about 30 s) and a real run that fails in the learner.
"""

import json
import re

import pytest

from precision_oat.runs.log import step_line
from tests.oat.cli import run_cli

STEPS = 3
# What the console may hold; every line Oat, launchpad, DeepSpeed or vLLM prints starts otherwise
# (launchpad's "[learner_0_0/0] ", DeepSpeed's "[2026-…", vLLM's "INFO …", absl's "I1203 …").
OUR_LINES = ("Oat's own output (", "precision-oat · backend oat · ", "precision policy:", "  ", "precision contract: ",
             "step ", "wandb: offline run in ", "done: ", "mismatch (mean over steps): ", "outputs: ")


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    out = tmp_path_factory.mktemp("oat-console")
    result = run_cli("--dtype", "fp32", "--steps", str(STEPS), "--prompts-per-step", "8", "--num-samples", "8",
                     "--max-new-tokens", "4", "--micro-batch-size", "16", "--output-dir", str(out),
                     "--wandb-mode", "offline")
    assert result.returncode == 0, result.stdout[-4000:]
    return out, result.stdout.splitlines()


def test_the_console_holds_only_the_local_backends_kinds_of_line(finished):
    out, lines = finished
    assert lines[0] == f"Oat's own output (launcher, actors, learner, launchpad, DeepSpeed, vLLM): {out}/oat.log"
    assert lines[1].startswith("precision-oat · backend oat · algo pg ")
    assert [line for line in lines if not line.startswith(OUR_LINES) and line] == []
    assert not any("\x1b" in line for line in lines)  # launchpad's colours stay in oat.log
    assert sum(line.startswith("precision contract: sampler fp32 · trainer compute fp32") for line in lines) == 1
    (wandb_run,) = (out / "wandb").glob("offline-run-*")
    assert [line for line in lines if line.startswith("wandb")] == [
        f"wandb: offline run in {wandb_run} (upload: wandb sync {wandb_run})"]
    assert lines[-1].startswith(f"outputs: {out}/") and "oat.log" in lines[-1]


def test_one_step_line_per_step_as_the_shared_formatter_writes_it(finished):
    out, lines = finished
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    printed = [line for line in lines if line.startswith("step ")]
    # Every step before the last ends with the time left; the rest of the line is the record's numbers.
    assert all(re.search(r"  eta \d+s$", line) for line in printed[:-1]) and "eta" not in printed[-1]
    without_eta = [re.sub(r"  eta \S+$", "", line) for line in printed]
    assert without_eta == [step_line(row, STEPS) for row in rows if "loss/policy" in row]
    assert len(printed) == STEPS


def test_oat_log_holds_oats_own_lines_and_the_relay_file_is_gone(finished):
    out, _ = finished
    log = (out / "oat.log").read_text(errors="replace")
    for node in ("learner_0_0", "actor_0_0", "ipc_server_0"):
        assert f"[{node}/0]" in log, node
    assert "=== GPU allocations ===" in log  # Oat's launcher, in this process
    assert "DeepSpeedEngine configuration" in log
    assert not (out / "learner_console.txt").exists()


def test_a_bad_input_the_learner_finds_ends_the_run_in_one_line(tmp_path):
    # Every prompt of the task is longer than 2 tokens: the learner refuses them while preparing its data, in its own
    # process; the launcher gives its line as the local backend would, with no traceback and no log tail.
    result = run_cli("--dtype", "fp32", "--steps", "1", "--max-prompt-length", "2", "--output-dir", str(tmp_path),
                     "--wandb-mode", "disabled")
    assert result.returncode == 1
    console = result.stdout
    assert re.search(r"^error: --max-prompt-length 2: \d+ of \d+ training prompts are longer \(longest \d+ tokens\); "
                     r"raise the limit, filter the data or pass --drop-long-prompts$", console, re.MULTILINE)
    assert "Traceback" not in console and "the Oat program failed" not in console
    assert (tmp_path / "learner_error.txt").read_text().startswith("bad input: --max-prompt-length 2: ")
    assert "\x1b" not in console


def test_drop_long_prompts_trains_on_the_prompts_that_fit_and_says_so(tmp_path):
    # The arithmetic prompts are 4 to 6 characters: a limit of 5 leaves out the longest, in the learner's process.
    result = run_cli("--dtype", "fp32", "--steps", "1", "--prompts-per-step", "8", "--num-samples", "8",
                     "--max-new-tokens", "4", "--micro-batch-size", "16", "--max-prompt-length", "5",
                     "--drop-long-prompts", "--output-dir", str(tmp_path), "--wandb-mode", "disabled")
    assert result.returncode == 0, result.stdout[-4000:]
    assert re.search(r"^--drop-long-prompts: left out \d+ of 256 training prompts longer than --max-prompt-length 5 "
                     r"tokens \(longest 6\)$", result.stdout, re.MULTILINE)
    assert re.search(r"^step +1/1 ", result.stdout, re.MULTILINE)


def test_a_misspelt_lora_target_is_refused_before_oat_starts(tmp_path):
    # Oat's peft would adapt q_proj and leave the misspelt name's layers without adapters, silently.
    result = run_cli("--dtype", "fp32", "--steps", "1", "--lora-rank", "4", "--lora-target-modules", "q_proj", "v_prj",
                     "--output-dir", str(tmp_path), "--wandb-mode", "disabled")
    assert result.returncode == 1
    assert re.search(r"^error: --lora-target-modules v_prj: no module of the model has this name; name its weight "
                     r"layers \(this model's: .*\bv_proj\b", result.stdout, re.MULTILINE)
    assert "Traceback" not in result.stdout and not (tmp_path / "oat").exists()
