"""The figures of experiments/h200/two_gpus.sh's results folder, as markdown tables.

    python experiments/h200/two_gpus_report.py FOLDER

agree    per ZeRO stage and dtype (batch-invariant or not), the one-GPU run against the two-GPU run: the steps each
         logged; at step 1, how many of the figures both logged (clocks left out) are equal and the largest relative
         difference; the first step whose mean answer length differs (sampling followed another path from there);
         the run's mean reward and token |Δlogp| on each side; the transports NCCL reported in the two-GPU run's log
kill     kill.txt, and whether the resumed run's steps follow on from the checkpoint with none missing or repeated
scaling  the mean step over steps 2… (step 1 holds the start-up), the final checkpoint left out, and its split, rank
         0's on one GPU and the slowest rank's on two, and the efficiency, one-GPU time / (2 × two-GPU time), of the
         step and of each part; one table for each number of prompts a step the folder holds (scaling<N>-one/ …)
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import Optional

from precision_oat.runs.log import read_metrics
from precision_oat.compare.stats import mean_of
from precision_oat.runs.folder import STEP_PARTS

PARTS = ("sample", "score", "update", "sync")
CLOCKS = ("perf/", "time/")
TRANSPORT = re.compile(r"NCCL INFO Channel \S+ : \S+ -> \S+ via (\S+)")


def train_rows(folder: Path) -> list[dict]:
    path = folder / "metrics.jsonl"
    return [r for r in read_metrics(path) if "reward/mean" in r] if path.is_file() else []


def relative(a: float, b: float) -> float:
    return abs(a - b) / max(abs(a), abs(b)) if a != b else 0.0


def step_one_agreement(one: dict, two: dict) -> tuple[int, int, Optional[tuple[float, str]]]:
    """(figures equal, figures compared, (largest relative difference, its key) or None when all are equal)."""
    keys = sorted(k for k in one.keys() & two.keys()
                  if not k.startswith(CLOCKS) and isinstance(one[k], (int, float)) and isinstance(two[k], (int, float)))
    differences = [(relative(one[k], two[k]), k) for k in keys]
    largest = max(differences, default=(0.0, ""))
    return sum(d == 0 for d, _ in differences), len(keys), largest if largest[0] > 0 else None


def first_divergence(one: list[dict], two: list[dict]) -> Optional[int]:
    return next((a["step"] for a, b in zip(one, two) if a["response/length_mean"] != b["response/length_mean"]), None)


def transports(log: Path) -> str:
    found = sorted(set(TRANSPORT.findall(log.read_text(errors="replace")))) if log.is_file() else []
    return ", ".join(found) or "–"


def mean(rows: list[dict], key: str) -> str:
    value = mean_of(rows, key)
    return "–" if value is None else f"{value:.3g}"


def agree_table(folder: Path) -> list[str]:
    lines = []
    for one_folder in sorted(p for p in folder.glob("one-*-*") if p.is_dir()):
        run = one_folder.name.removeprefix("one-")
        zero, dtype = run.split("-", 1)
        dtype = dtype.replace("-invariant", ", batch-invariant")
        one, two = train_rows(one_folder), train_rows(folder / f"two-{run}")
        if not one or not two:
            continue
        equal, compared, largest = step_one_agreement(one[0], two[0])
        largest_text = f"{largest[0]:.1e} ({largest[1]})" if largest else "0"
        diverged = first_divergence(one, two)
        lines.append(f"| {zero} | {dtype} | {one[-1]['step']} / {two[-1]['step']} | {equal} of {compared} | "
                     f"{largest_text} | {diverged or '–'} | {mean(one, 'reward/mean')} / {mean(two, 'reward/mean')} | "
                     f"{mean(one, 'mismatch/abs_logp_diff_mean')} / {mean(two, 'mismatch/abs_logp_diff_mean')} | "
                     f"{transports(folder / f'two-{run}.log')} |")
    header = ["| ZeRO | dtype | steps (1 / 2 GPUs) | step 1: figures equal | step 1: largest relative difference | "
              "answers first differ at step | mean reward (1 / 2) | mean token \\|Δlogp\\| (1 / 2) | NCCL transports |",
              "|---|---|---|---|---|---|---|---|---|"]
    return header + lines if lines else []


def kill_lines(folder: Path) -> list[str]:
    report = folder / "kill.txt"
    if not report.is_file():
        return []
    steps = [r["step"] for r in train_rows(folder / "kill")]
    follows = steps == list(range(1, len(steps) + 1))
    return [*report.read_text().splitlines(), "",
            f"the run's steps: 1–{steps[-1] if steps else 0}, "
            f"{'each once' if follows else 'with steps missing or repeated: ' + str(steps)}"]


def step_split(rows: list[dict], prefix: str) -> tuple[float, dict[str, float]]:
    """Over steps 2…, the mean of each part under ``prefix`` (``perf/time`` or ``perf/time_slowest``), and the
    step: their sum but the checkpoint's, which the last step writes and which is not what scaling is about."""
    split = {part: mean_of(rows, f"{prefix}/{part}", slice(1, None)) or 0.0 for part in STEP_PARTS}
    return sum(seconds for part, seconds in split.items() if part != "save"), split


def scaling_prompts(folder: Path) -> list[int]:
    """The prompts a step of each scaling measurement the folder holds (either side), in order."""
    found = (re.fullmatch(r"scaling(\d*)-(?:one|two)", path.name) for path in folder.iterdir() if path.is_dir())
    return sorted({int(match[1] or 8) for match in found if match})


def scaling_lines(folder: Path, prompts: int = 8) -> list[str]:
    """The table of the sides that logged two steps or more; the efficiency once both did."""
    name = "scaling" if prompts == 8 else f"scaling{prompts}"  # two_gpus.sh's folder names
    sides = {"one": (1, "perf/time"), "two": (2, "perf/time_slowest")}
    rows = {side: train_rows(folder / f"{name}-{side}") for side in sides}
    logged = [side for side in sides if len(rows[side]) >= 2]
    if not logged:
        return ["(no side has logged two steps; step 1 holds the start-up)"] if any(rows.values()) else []
    lines = [f"| GPUs | step, its checkpoint left out | {' | '.join(PARTS)} |", f"|---|---|{'---|' * len(PARTS)}"]
    times = []  # each side's step and its parts
    for side in logged:
        gpus, prefix = sides[side]
        step, split = step_split(rows[side], prefix)
        times.append([step, *(split[p] for p in PARTS)])
        lines.append(f"| {gpus} | {step:.2f} s | {' | '.join(f'{split[p]:.2f} s' for p in PARTS)} |")
    if len(times) < 2:
        missing = next(side for side in sides if side not in logged)
        return [*lines, "", f"efficiency: – ({name}-{missing} has not run)"]
    one, two = times
    lines.append(f"| efficiency | {' | '.join(f'{a / (2 * b):.2f}' for a, b in zip(one, two))} |")
    return [*lines, "", f"efficiency: {one[0] / (2 * two[0]):.2f} (one-GPU step / (2 × two-GPU step))"]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("folder", type=Path, help="two_gpus.sh's results folder")
    folder = parser.parse_args(argv).folder
    if not folder.is_dir():
        parser.error(f"{folder}: no such folder; pass the RUNS folder two_gpus.sh wrote")
    scaling = [(f"scaling at {prompts} prompts a step" if prompts != 8 else "scaling", scaling_lines(folder, prompts))
               for prompts in scaling_prompts(folder) or [8]]
    for title, lines in (("agree", agree_table(folder)), ("kill", kill_lines(folder)), *scaling):
        print(f"## {title}\n")
        print("\n".join(lines) if lines else "(not run)")
        print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
