"""The folder of a run: where it goes, and the summary computed from its metrics (both engines)."""

from __future__ import annotations

import time
from pathlib import Path

from precision_oat.args import Args

SUMMARY_KEYS = ["mismatch/abs_logp_diff_mean", "mismatch/seq_logratio_std", "mismatch/k3", "mismatch/k1"]


def output_dir_for(args: Args) -> Path:
    if args.log.output_dir is not None:
        return Path(args.log.output_dir)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return Path("runs") / f"{args.algorithm.algo}-{args.precision.dtype}-{stamp}"


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
    }
    print(
        f"\ndone: {summary['steps']} steps in {summary['elapsed_s']:.0f}s · reward {first:.3f} → {last:.3f} "
        f"(mean of first/last {window} steps)\n"
        f"mismatch (mean over steps): |Δlogp| {summary.get('mismatch/abs_logp_diff_mean', float('nan')):.3e}  "
        f"seq log-ratio std {summary.get('mismatch/seq_logratio_std', float('nan')):.3e}  "
        f"k3 {summary.get('mismatch/k3', float('nan')):.3e} · skipped steps {summary['skipped_steps']:.0f}\n"
        f"outputs: {out}/metrics.jsonl, config.json, summary.json, checkpoints/",
        flush=True,
    )
    if probe:
        summary["probe"] = probe
        line = "  ".join(f"{d} {r['mismatch/abs_logp_diff_mean']:.2e}" for d, r in probe["dtypes"].items())
        print(f"final policy, |Δlogp| per dtype (same prompts, sampler vs trainer): {line}", flush=True)
        if probe["ratios"]:
            ratios = probe["ratios"]
            print(f"bf16/fp16: {ratios['abs_logp_diff_mean']:.1f}x token |Δlogp|, "
                  f"{ratios['seq_logratio_std']:.1f}x seq log-ratio std, {ratios['k3']:.0f}x k3 "
                  f"(mismatch_probe.json)", flush=True)
    return summary
