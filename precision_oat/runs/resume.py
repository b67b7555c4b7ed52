"""``--resume``: which flags may differ from the run's config.json, a finished run, and the record of each resume.

A resumed run is the same experiment continued, so a flag that changes what a step computes
(dtype, algorithm, seed, model, task, batch sizes, learning rate, …) is refused, naming the
flag with the run's value and the new one. The flags of :data:`SAFE_ON_RESUME` only extend
the run or change what is logged, saved, evaluated or which resources run it; they are
accepted and recorded: config.json keeps the run's original values and gains a ``resumes``
list, one entry per resume with its step and ``{flag: [old, new]}``. Other micro-batches,
log-prob chunks, compiled layers, another device or other vLLM batching change the rounding:
such a resumed run is the same run up to rounding, no longer bit-exact with a straight one. A
flag added after the run started counts as its default there. Flags not named here are
refused, so a new flag is never ignored silently.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any, Collection, Optional

from precision_oat.args import Args
from precision_oat.checks import flag, shown
from precision_oat.errors import UserError
from precision_oat.presets import to_values
from precision_oat.runs.checkpoint import checkpoints_newest_first, point_latest, step_of
from precision_oat.runs.folder import is_unmarked_run, mark_run, write_json
from precision_oat.runs.token_export import drop_tokens_after

SAFE_ON_RESUME = frozenset({
    # the length of the run: more steps extend it
    "steps",
    # outputs
    "log_every", "save_every", "save_every_minutes", "keep_checkpoints", "wandb_mode", "wandb_project", "run_name", "probe_dtypes",
    "profile_update", "mismatch_alarm", "mismatch_alarm_action", "export_tokens",
    # evaluation, which never feeds back into training
    "eval_every", "eval_data", "eval_benchmarks", "eval_limit", "eval_samples", "eval_temperature", "eval_top_p",
    "eval_max_new_tokens",
    # resources: the same step computed on other hardware or in other memory chunks
    "device", "micro_batch_size", "micro_batch_tokens", "gradient_checkpointing", "compile_layers", "logprob_chunk_size",
    "vllm_gpu_memory_utilization", "vllm_kv_cache_gb", "vllm_max_num_seqs", "vllm_prefix_caching", "vllm_enforce_eager",
    "vllm_sleep",
    # the fp16 preflight runs before a new run only
    "skip_fp16_preflight", "fp16_preflight_margin",
})
# The classes given as --learner-class / --actor-class or to train() (recorded as module:qualname).
CLASS_FLAGS = ("learner_class", "actor_class")
# How this command starts, not what the run is.
NOT_COMPARED = frozenset({"output_dir", "resume", "overwrite", "preset"})


def read_config(out: Path) -> dict:
    path = out / "config.json"
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise UserError(f"--resume: cannot read {path} ({type(e).__name__}), so the flags of the run are unknown; "
                        "start a new run in another --output-dir") from None


def current_values(config: dict) -> dict:
    """The run's flag values now: config.json's original ones with each resume's changes applied."""
    values = {k: v for k, v in config.items() if k != "resumes"}
    for entry in config.get("resumes", []):
        values.update({name: new for name, (_, new) in entry["changed"].items()})
    return values


def changed_flags(config: dict, flags: dict) -> dict[str, list[Any]]:
    """flag name → [the run's value, this command's value] for every compared flag that differs.

    ``flags`` holds this command's flag values as config.json records them (:func:`~precision_oat.presets.to_values`).
    """
    run = current_values(config)
    defaults = _normal(to_values(Args()))
    wanted = _normal(flags)
    changes = {}
    for name, value in wanted.items():
        old = run.get(name, defaults.get(name))
        if name not in NOT_COMPARED and value != old:
            changes[name] = [old, value]
    return changes


def check_resume(out: Path, flags: dict, steps: int, checkpoint_step: int,
                 unread: Collection[str] = ()) -> Optional[dict]:
    """Refuse a resume that changes the run's meaning; return the summary of a run with nothing left to do.

    ``flags`` are this command's flag values (:func:`changed_flags`), ``steps`` its ``--steps``, ``unread`` the flags
    the run does not read (:func:`~precision_oat.args.unread_flags`), which change nothing. Writes nothing: a finished
    run stays as it is, and :func:`record_resume` notes a resume once it has loaded.
    """
    changes = changed_flags(read_config(out), flags)
    refused = {name: values for name, values in changes.items() if name not in SAFE_ON_RESUME and name not in unread}
    for name in CLASS_FLAGS:
        if name in refused:
            old, new = refused[name]
            fix = (f"resume with {flag(name)} {old} (from Python: train(args, {name}=…))" if old is not None
                   else f"resume without {flag(name)} or {name}=")
            raise UserError(f"--resume: the run in {out} was trained with the {name.split('_')[0]} class "
                            f"{old or 'none (the stock one)'} and this command gives {new or 'none'}; {fix}, or start "
                            "a new run in another --output-dir")
    if refused:
        listed = ", ".join(f"{flag(n)} {shown(new)} (the run has {shown(old)})" for n, (old, new) in refused.items())
        raise UserError(f"--resume: {listed} would change what the run computes; resume with the run's values "
                        f"(see {out / 'config.json'}) or start a new run in another --output-dir")
    if steps < checkpoint_step:
        raise UserError(f"--steps {steps}: the run in {out} already reached step {checkpoint_step}; "
                        f"resume with --steps {checkpoint_step} or more")
    summary = _read_summary(out) if steps == checkpoint_step else None
    if summary is not None and summary.get("steps") != steps:
        summary = None  # an earlier part's, left by a resume from before resumes deleted it
    if summary is not None:
        print(f"the run in {out} is finished (step {steps} of --steps {steps}, summary.json); nothing to do. "
              f"Resume with --steps N > {steps} to extend it.", flush=True)
    return summary


def record_resume(out: Path, flags: dict, step: int) -> None:
    """Append this resume (its step and the flags of ``flags`` that changed) to config.json's ``resumes``; the original
    values stay."""
    config = read_config(out)
    changes = changed_flags(config, flags)
    config["resumes"] = [*config.get("resumes", []), {"step": step, "changed": changes}]
    if is_unmarked_run(out):
        mark_run(out)  # a run from before the marker: resuming makes it a marked one
    write_json(out / "config.json", config)


def drop_superseded(out: Path, checkpoint: Path) -> None:
    """Delete what the run wrote after ``checkpoint``, as its metrics rows past it are cut: the token
    files, profile and checkpoints of the steps the resume runs again (a checkpoint it fell back over included), and
    the end of the run (probe and summary). What the resumed run makes again it writes anew; what it no longer makes
    (another ``--export-tokens``, ``--profile-update`` or ``--probe-dtypes``) is gone, and until it ends the folder
    is that of an unfinished run. ``latest`` names ``checkpoint`` again."""
    step = step_of(checkpoint)
    drop_tokens_after(out, step)
    for folder in checkpoints_newest_first(out):
        if step_of(folder) > step:
            shutil.rmtree(folder)
    point_latest(checkpoint)
    profile = out / "profile.json"
    if profile.is_file() and json.loads(profile.read_text())["step"] > step:
        profile.unlink()
    (out / "mismatch_probe.json").unlink(missing_ok=True)
    (out / "summary.json").unlink(missing_ok=True)


def _read_summary(out: Path) -> Optional[dict]:
    """summary.json, or None when it is missing or unreadable (the run then writes it again)."""
    try:
        return json.loads((out / "summary.json").read_text())
    except (OSError, json.JSONDecodeError):
        return None


def _normal(values: dict) -> dict:
    """``values`` as config.json holds them (JSON types: lists, not tuples)."""
    return json.loads(json.dumps(values))
