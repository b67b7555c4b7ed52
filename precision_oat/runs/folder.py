"""The folder of a run: where it goes, how a new run claims it, and the summary computed from its metrics (both backends)."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import time
from pathlib import Path
from typing import Optional

from precision_oat.args import Args, run_contract
from precision_oat.errors import UserError
from precision_oat.presets import to_values

# Written first into the folder of every run and by nothing else: its presence means the folder holds a run.
RUN_MARKER = "precision-oat-run.json"
# What a run writes into its folder (either backend); --overwrite deletes exactly these, in a folder with the marker.
RUN_FILES = ("config.json", "metrics.jsonl", "metrics.jsonl.tmp", "summary.json", "mismatch_probe.json", "checkpoints",
             "preflight.json", "preflight.txt", "profile.json", "tokens", "wandb", "vllm_init", "initial_model", "oat",
             "oat.log", "learner_error.txt", "learner_console.txt")
# What the one-line description of a run names, when present.
DESCRIBED = ("config.json", "metrics.jsonl", "checkpoints")
# Keys of a config.json this library wrote (a run from before the marker is recognised by them).
CONFIG_KEYS = ("precision_contract", "algo", "dtype", "output_dir")

SUMMARY_KEYS = ["mismatch/abs_logp_diff_mean", "mismatch/seq_logratio_std", "mismatch/k3", "mismatch/k1"]
# Where a step's wall time goes: ``perf/time/<part>`` in seconds, "other" being the rest of the step. A step's time
# runs from the previous step's record to its own; "log" holds the writing of that previous record.
STEP_PARTS = ("sample", "score", "update", "sync", "reward", "save", "log", "other")


def make_output_dir(out: Path) -> Path:
    """``out``, made when missing; one line naming ``--output-dir`` where it cannot be."""
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise cannot_write(out, e) from None
    return out


def cannot_write(out: Path, error: OSError, flag: str = "--output-dir", what: str = "a folder") -> UserError:
    """One line naming ``flag`` and its path ``out``, which ``error`` kept from being made or written."""
    return UserError(f"{flag} {out}: cannot be created or written ({type(error).__name__}: "
                     f"{error.strerror or error}); pass {what} in a place you can write")


def output_dir_for(output_dir: Optional[str], algo: str, dtype: str) -> Path:
    """``--output-dir``, or a new folder runs/ALGO-DTYPE-TIME."""
    if output_dir is not None:
        return Path(output_dir)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    base = Path("runs") / f"{algo}-{dtype}-{stamp}"
    # Runs started in the same second get their own folders.
    folder, n = base, 1
    while folder.exists():
        n += 1
        folder = base.with_name(f"{base.name}-{n}")
    return folder


def holds_run(out: Path) -> bool:
    """True when ``out`` is the folder of a run of this library: its marker, or a run from before the marker."""
    return (out / RUN_MARKER).is_file() or is_unmarked_run(out)


def is_unmarked_run(out: Path) -> bool:
    """A run written before the marker existed: no marker, and a config.json holding this library's keys."""
    if (out / RUN_MARKER).exists():
        return False
    try:
        config = json.loads((out / "config.json").read_text())
    except (OSError, ValueError):
        return False
    return isinstance(config, dict) and all(key in config for key in CONFIG_KEYS)


def mark_run(out: Path) -> None:
    """Write the marker that makes ``out`` a run's folder: the names of RUN_FILES in it are then this library's files."""
    write_json(out / RUN_MARKER, {"written_by": "precision-oat", "meaning": "this folder holds a precision-oat run; "
                                  "--overwrite deletes only the files a run writes"})


def start_new_run(out: Path, args: Args) -> None:
    """Make ``out`` the folder of a new run: refuse when it holds one, unless ``--overwrite`` deletes it; write config.json."""
    stopped = check_new_run(out, args.log.overwrite)
    if stopped:
        # Nothing of it is worth keeping: its flags are the ones being replaced, and it has no step to resume.
        print(f"--output-dir {out}: its earlier run stopped before its first step ({describe_run(out, stopped)}); "
              "starting afresh there", flush=True)
    for name in RUN_FILES:
        path = out / name
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        elif path.exists() or path.is_symlink():
            path.unlink()
    mark_run(out)
    write_json(out / "config.json", config_values(out, args))


def check_new_run(out: Path, overwrite: bool) -> list[str]:
    """Refuse ``out`` for a new run when it holds a run (unless ``overwrite``, ``--overwrite``) or files a run would
    write over.

    Reads only. A folder without a run may hold anything but the names of RUN_FILES. Returns the files
    of a run there that stopped before its first step (the new run replaces it), or an empty list.
    """
    if not holds_run(out):
        foreign = [name + ("/" if (out / name).is_dir() else "") for name in RUN_FILES
                   if (out / name).exists() or (out / name).is_symlink()]
        if foreign:
            raise UserError(
                f"--output-dir {out} holds {', '.join(foreign)} but no precision-oat run ({RUN_MARKER} is missing), "
                "and a run would write over them; pass another --output-dir or move them away (--overwrite deletes "
                "only a run's own files)"
            )
        return []
    found = [name for name in DESCRIBED if (out / name).exists()]
    if found and stopped_before_first_step(out):
        return found
    if found and not overwrite:
        if not any((out / "checkpoints").glob("step_*")):
            raise UserError(
                f"--output-dir {out} already holds a run ({describe_run(out, found)}) that saved no checkpoint, so "
                "--resume cannot continue it; add --overwrite to delete it and start again, or pass another --output-dir"
            )
        raise UserError(
            f"--output-dir {out} already holds a run ({describe_run(out, found)}); continue it with --resume, "
            "pass another --output-dir, or add --overwrite to delete that run and start again"
        )
    return []


def stopped_before_first_step(out: Path) -> bool:
    """True when the run in ``out`` wrote its config.json and nothing after: no metrics row, no checkpoint, no summary."""
    metrics = out / "metrics.jsonl"
    return (not (out / "checkpoints").exists() and not (out / "summary.json").exists()
            and (not metrics.exists() or not metrics.read_text().strip()))


def describe_run(out: Path, found: list[str]) -> str:
    parts = []
    for name in found:
        if name == "metrics.jsonl":
            rows = sum(1 for line in (out / name).read_text().splitlines() if line.strip())
            parts.append(f"metrics.jsonl with {rows} row{'s' if rows != 1 else ''}")
        elif name == "checkpoints":
            steps = sorted(p.name for p in (out / name).glob("step_*"))
            parts.append(f"checkpoints/ {steps[-1]}" if steps else "checkpoints/")
        else:
            parts.append(name)
    if (out / "summary.json").is_file():
        parts.append("summary.json: finished")
    return ", ".join(parts)


def config_values(out: Path, args: Args) -> dict:
    """The flag values config.json records (``output_dir`` as the folder actually used), and the precision contract."""
    values = to_values(dataclasses.replace(args, log=dataclasses.replace(args.log, output_dir=out)))
    return {**values, "precision_contract": run_contract(args.precision, args.lora, args.backend)}


def write_json(path: Path, value) -> None:
    """Write ``path`` atomically: a crash leaves the old file or the new one, never half of one."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(value, indent=2))
    os.replace(tmp, path)


def step_time_split(history: list[dict]) -> dict:
    """``step_time``: each part's mean seconds per step and its share of the steps' total, over the rows that have them.

    A step whose update ran under the profiler (``--profile-update``) is left out: the profiler slows it, and
    reading its record lands in that step's ``other``.
    """
    keys = [f"perf/time/{part}" for part in STEP_PARTS]
    rows = [h for h in history if all(k in h for k in keys) and not h.get("perf/profiled")]
    total = sum(h[k] for h in rows for k in keys)
    if not rows or total <= 0:
        return {}
    return {"step_time": {part: {"mean_s": sum(h[k] for h in rows) / len(rows),
                                 "share": sum(h[k] for h in rows) / total} for part, k in zip(STEP_PARTS, keys)}}


def outputs_of(out: Path) -> list[str]:
    """What the run wrote into ``out``, folders with a trailing "/"; summary.json counts, as the caller writes it next."""
    shown = [name for name in RUN_FILES if name != "metrics.jsonl.tmp"]
    return [name + "/" if (out / name).is_dir() else name
            for name in shown if name == "summary.json" or (out / name).exists()]


def summarize_run(history: list[dict], out: Path, probe: dict | None = None) -> dict:
    if not history:
        return {"output_dir": str(out)}
    window = max(1, len(history) // 10)
    first = sum(h["reward/mean"] for h in history[:window]) / window
    last = sum(h["reward/mean"] for h in history[-window:]) / window
    summary = {
        "output_dir": str(out),
        "steps": history[-1]["step"],
        "reward_first": first,
        "reward_last": last,
        **{k: sum(h[k] for h in history) / len(history) for k in SUMMARY_KEYS if k in history[0]},
        "skipped_steps": history[-1].get("train/skipped_steps", 0.0),
        "elapsed_s": history[-1]["time/elapsed_s"],
        **step_time_split(history),
    }
    print(
        f"\ndone: {summary['steps']} steps in {summary['elapsed_s']:.0f}s · reward {first:.3f} → {last:.3f} "
        f"(mean of first/last {window} steps)\n"
        f"mismatch (mean over steps): |Δlogp| {summary.get('mismatch/abs_logp_diff_mean', float('nan')):.3e}  "
        f"seq log-ratio std {summary.get('mismatch/seq_logratio_std', float('nan')):.3e}  "
        f"k3 {summary.get('mismatch/k3', float('nan')):.3e} · skipped steps {summary['skipped_steps']:.0f}\n"
        f"outputs: {out}/{', '.join(outputs_of(out))}",
        flush=True,
    )
    if "step_time" in summary:
        print("time per step: " + " · ".join(f"{part} {t['mean_s']:.2f}s ({t['share']:.0%})"
                                             for part, t in summary["step_time"].items()), flush=True)
    if probe:
        summary["probe"] = probe
        line = "  ".join(f"{d} {r['mismatch/abs_logp_diff_mean']:.2e}" for d, r in probe["dtypes"].items())
        m = probe["measured"]
        print(f"final policy, |Δlogp| per dtype ({m['sampler']} sampler vs {m['trainer']} trainer at top-p {m['top_p']:g}, "
              f"{m['prompts']} prompts × {m['samples_per_prompt']}): {line}", flush=True)
        if probe["ratios"]:
            from precision_oat.precision.mismatch_metrics import times

            ratios = probe["ratios"]
            print(f"bf16/fp16: {times(ratios['abs_logp_diff_mean'])} token |Δlogp|, "
                  f"{times(ratios['seq_logratio_std'])} seq log-ratio std, {times(ratios['k3'], 0)} k3 "
                  f"(mismatch_probe.json)", flush=True)
    return summary
