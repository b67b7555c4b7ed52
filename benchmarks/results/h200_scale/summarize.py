"""Tables of this folder's H200 runs (experiments/h200/scale.sh): SmolLM2's loop and the scale ladder.

    python3 summarize.py [FOLDER]    # default: the folder of this script

A loop's step time is the wall clock between consecutive metrics rows (step 1, which also
compiles and warms up, is left out, and so is a step whose update ran under the profiler,
``--profile-update``); its split is the mean of ``perf/time/*`` over the same steps.
"""

import json
import sys
from pathlib import Path
from statistics import mean, median

PARTS = ("sample", "score", "update", "sync", "reward", "other")


def loop_stats(folder: Path) -> dict:
    """A loop's prompts × samples, rows logged, median step time, response tokens and sampler tok/s a step, its mean
    split over PARTS, and the share of the split outside sampling and updating."""
    config = json.loads((folder / "config.json").read_text())
    rollout = config.get("rollout", config)
    responses = rollout["prompts_per_step"] * rollout["num_samples"]
    rows = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines() if line.strip()]
    profiled = config.get("profile_update")
    timed = [r for r in rows[1:] if r["step"] != profiled]
    steps = [b["time/elapsed_s"] - a["time/elapsed_s"] for a, b in zip(rows, rows[1:]) if b["step"] != profiled]
    split = {p: mean(r[f"perf/time/{p}"] for r in timed) for p in PARTS}
    return {"shape": f"{rollout['prompts_per_step']} × {rollout['num_samples']}", "rows": len(rows),
            "step_s": median(steps), "tokens": median(r["response/length_mean"] * responses for r in timed),
            "sampler_tokens_per_s": median(r["perf/sample_tokens_per_s"] for r in timed), "split": split,
            "outside": (split["sync"] + split["reward"] + split["other"]) / sum(split.values())}


def loop_row(folder: Path) -> str:
    s = loop_stats(folder)
    split, total = s["split"], sum(s["split"].values())
    return (f"| {folder.name} | {s['shape']} | {s['rows']} | {s['step_s']:.2f} | {s['tokens']:,.0f} | "
            f"{s['sampler_tokens_per_s']:,.0f} | {s['tokens'] / s['step_s']:,.0f} | "
            + " | ".join(f"{split[p]:.2f} ({split[p] / total:.0%})" for p in PARTS) + f" | {s['outside']:.1%} |")


def ladder_rows(path: Path) -> list[str]:
    result = json.loads(path.read_text())
    rows = []
    for cell in result["cells"] + result["ratio_cells"]:
        head = f"| {cell['model']} | {cell['response_length']} | {cell['dtype']} |"
        if not cell.get("fits"):
            verdict = "not measured" if cell.get("fits") is None else "no"
            rows.append(f"{head} {verdict} ({cell.get('error', 'no micro-batch fits')[:120]}) |" + " |" * 9)
            continue
        rows.append(f"{head} yes | {cell['micro_batch_size']} | {cell['learner_peak_gb']:.1f} | "
                    f"{cell['sampler_reserved_gb']:.1f} | {cell['sampler_tokens_per_s']:,.0f} | "
                    f"{cell['learner_tokens_per_s']:,.0f} | {cell['mfu']:.1%} | {cell['step_time_s']:.1f} | "
                    + " ".join(f"{cell[f'perf/time/{p}']:.1f}" for p in ("sample", "score", "update", "sync", "other"))
                    + " |")
    for part in ("step", "learner"):
        for name, ratio in result.get(f"fp16_over_bf16_{part}_time", {}).items():
            rows.append(f"| {name} fp16/bf16 {part} time | {ratio:.3f}x |")
    return rows


def main(folder: Path) -> None:
    """Prints the folder's loop table and its ladder table, each only where the folder holds that kind of run."""
    loops = sorted(p.parent for p in folder.glob("*/metrics.jsonl"))
    ladders = sorted(folder.glob("ladder*.json"))
    if loops:
        print("| loop | prompts × samples | steps | s/step | response tokens/step | sampler tok/s | end-to-end "
              "generated tok/s | " + " | ".join(PARTS) + " | outside sampling + updating |")
        print("|---" * (8 + len(PARTS)) + "|")
        print("\n".join(loop_row(run) for run in loops))
    if loops and ladders:
        print()
    if ladders:
        print("| model | response tokens | dtype | fits | micro-batch | learner peak GiB | sampler GiB | sampler tok/s | "
              "learner tok/s | MFU | step s | sample score update sync other (s) |")
        print("|---" * 12 + "|")
        print("\n".join(row for path in ladders for row in ladder_rows(path)))


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parent)
