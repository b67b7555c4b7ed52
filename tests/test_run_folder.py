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


def test_the_probes_ratio_of_two_zero_mismatches_prints_as_nan(tmp_path, capsys):
    # Before: 0 / 0 printed as "infx".
    from precision_oat.lab.lab import RATIO_KEYS, bf16_fp16_ratios

    stats = {f"mismatch/{key}": 0.0 for key in RATIO_KEYS}
    dtypes = {"bf16": stats, "fp16": stats}
    measured = {"sampler": "builtin", "trainer": "hf", "top_p": 1.0, "prompts": 2, "samples_per_prompt": 4}
    summarize_run([ROW], tmp_path, probe={"measured": measured, "dtypes": dtypes, "ratios": bf16_fp16_ratios(dtypes)})
    assert ("bf16/fp16: nan token |Δlogp|, nan seq log-ratio std, nan k3 (mismatch_probe.json)"
            in capsys.readouterr().out.splitlines())


# --- which folders hold a run, and what --overwrite deletes ---


def _args(out, **log):
    from precision_oat.args import Args, LogArgs

    return Args(log=LogArgs(output_dir=out, wandb_mode="disabled", **log))


def _user_files(folder):
    """A folder of the user's own: a stray config.json (a model's, say), a wandb/ of another project, notes."""
    folder.mkdir(exist_ok=True)
    (folder / "config.json").write_text(json.dumps({"model_type": "llama"}))
    (folder / "wandb").mkdir()
    (folder / "wandb" / "run-20250101_000000-abc").write_text("another project's run\n")
    (folder / "notes.txt").write_text("the user's notes\n")
    return {p.relative_to(folder): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def _contents(folder):
    return {p.relative_to(folder): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def test_a_stray_config_json_is_no_run_and_overwrite_deletes_none_of_the_users_files(tmp_path):
    import pytest

    from precision_oat.errors import UserError
    from precision_oat.runs.folder import start_new_run

    before = _user_files(tmp_path / "mine")
    for overwrite in (False, True):
        with pytest.raises(UserError) as e:
            start_new_run(tmp_path / "mine", _args(tmp_path / "mine", overwrite=overwrite))
        message = str(e.value)
        assert "\n" not in message
        assert message.startswith(f"--output-dir {tmp_path / 'mine'} holds config.json, wandb/ but no precision-oat run")
        assert "pass another --output-dir" in message
        assert _contents(tmp_path / "mine") == before


def test_overwrite_deletes_the_run_files_of_a_marked_folder_and_keeps_the_rest(tmp_path):
    import pytest

    from precision_oat.errors import UserError
    from precision_oat.runs.folder import RUN_MARKER, holds_run, start_new_run

    out = tmp_path / "run"
    out.mkdir()
    (out / "notes.txt").write_text("the user's notes\n")
    start_new_run(out, _args(out))
    assert (out / RUN_MARKER).is_file() and holds_run(out)
    (out / "metrics.jsonl").write_text(json.dumps(ROW) + "\n")
    (out / "wandb").mkdir()
    with pytest.raises(UserError, match="already holds a run"):
        start_new_run(out, _args(out))
    start_new_run(out, _args(out, overwrite=True))
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "notes.txt", RUN_MARKER]


def test_a_run_from_before_the_marker_is_recognised_by_its_config_json(tmp_path):
    import pytest

    from precision_oat.errors import UserError
    from precision_oat.runs.folder import RUN_MARKER, config_values, holds_run, is_unmarked_run, start_new_run

    out = tmp_path / "old-run"
    out.mkdir()
    (out / "config.json").write_text(json.dumps(config_values(out, _args(out))))
    (out / "metrics.jsonl").write_text(json.dumps(ROW) + "\n")
    assert is_unmarked_run(out) and holds_run(out)
    with pytest.raises(UserError, match="already holds a run .*metrics.jsonl with 1 row"):
        start_new_run(out, _args(out))
    start_new_run(out, _args(out, overwrite=True))
    assert (out / RUN_MARKER).is_file() and not (out / "metrics.jsonl").exists() and not is_unmarked_run(out)


def test_resume_refuses_a_folder_that_holds_no_run(tmp_path):
    import pytest

    from precision_oat.errors import UserError
    from precision_oat.runs.checkpoint import require_checkpoint

    _user_files(tmp_path / "mine")
    (tmp_path / "mine" / "checkpoints").mkdir()
    with pytest.raises(UserError, match=r"^--resume: .* holds no precision-oat run \(precision-oat-run.json is missing\)"):
        require_checkpoint(tmp_path / "mine")
