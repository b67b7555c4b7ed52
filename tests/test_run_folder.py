"""The end-of-run summary names what the run folder really holds."""

from __future__ import annotations

import json

from precision_oat.runs.folder import summarize_run

ROW = {"step": 1, "reward/mean": 0.5, "time/elapsed_s": 1.0}


def _outputs_line(text: str) -> str:
    return next(line for line in text.splitlines() if line.startswith("outputs: "))


def _fill(folder, files=(), dirs=()):
    for name in files:
        (folder / name).write_text(json.dumps({}))
    for name in dirs:
        (folder / name).mkdir()


def test_the_outputs_line_lists_the_probe_the_preflight_and_wandb_when_they_exist(tmp_path, capsys):
    _fill(tmp_path, files=["config.json", "metrics.jsonl", "mismatch_probe.json", "preflight.json", "preflight.txt",
                           "run.lock"], dirs=["checkpoints", "wandb"])
    summarize_run([ROW], tmp_path)
    # summary.json is written right after the line by the caller, so the line names it too.
    assert _outputs_line(capsys.readouterr().out) == (
        f"outputs: {tmp_path}/config.json, metrics.jsonl, summary.json, mismatch_probe.json, checkpoints/, "
        "preflight.json, preflight.txt, wandb/"
    )


def test_the_outputs_line_leaves_out_what_the_run_did_not_write(tmp_path, capsys):
    # An Oat run: no checkpoints/ of ours, no preflight, no probe, wandb disabled; Oat's own folder instead.
    _fill(tmp_path, files=["config.json", "metrics.jsonl"], dirs=["oat"])
    summarize_run([ROW], tmp_path)
    assert _outputs_line(capsys.readouterr().out) == f"outputs: {tmp_path}/config.json, metrics.jsonl, summary.json, oat/"
