"""The scale ladder's grid (docs/results.md §4d): every shape × response length at the grid's settings, each
from the H200 run that measured it most often, the newest of those.

    python3 benchmarks/results/h200_scale/grid.py [RESULTS]    # default: the folder above this script's

The grid's settings are the ladder's defaults: fp16, gradient checkpointing, decoder layers not compiled
(the runs' other cells, without checkpointing or compiled, are in their own tables). A cell measured
several times in one run (the fp16/bf16 ratio's cells) is shown at its median step time, and that median
stands before a later run's single measurement.
"""

import json
import sys
from collections import defaultdict
from pathlib import Path

MODELS = ("smollm2-135m", "qwen2.5-0.5b", "qwen2.5-1.5b", "qwen2.5-3b")
LENGTHS = (1024, 4096, 8192)
PARTS = ("sample", "score", "update", "sync", "other")


def run_number(folder: Path) -> int:
    """h200_scale is the first run, h200_scale_N the N-th."""
    return int(folder.name.rsplit("_", 1)[1]) if folder.name != "h200_scale" else 1


def grid_cells(results: Path) -> dict[tuple[str, int], tuple[str, dict]]:
    """(model, response length) → (the run's folder, its cell), from the run with the most measurements of it, the
    newest of those."""
    found, counts = {}, {}
    for path in sorted(results.glob("h200_scale*/ladder*.json"), key=lambda p: run_number(p.parent)):
        result = json.loads(path.read_text())
        settings = result["settings"]
        if not settings.get("gradient_checkpointing", True) or settings.get("compile_layers"):
            continue
        measured = defaultdict(list)
        for cell in result["cells"] + result["ratio_cells"]:
            if cell.get("fits") and cell["dtype"] == "fp16":
                measured[cell["model"], cell["response_length"]].append(cell)
        for key, cells in measured.items():
            if len(cells) < counts.get(key, 0):
                continue
            cells.sort(key=lambda c: c["step_time_s"])
            found[key], counts[key] = (path.parent.name, cells[(len(cells) - 1) // 2]), len(cells)
    return found


def grid_rows(results: Path) -> list[str]:
    cells = grid_cells(results)
    rows = ["| model | response tokens | run | micro-batch | learner peak GiB | sampler GiB | sampler tok/s | "
            "learner tok/s | MFU | step s | sample score update sync other (s) |",
            "|---" * 11 + "|"]
    for model in MODELS:
        for length in LENGTHS:
            if (model, length) not in cells:
                rows.append(f"| {model} | {length} | not measured yet |" + " |" * 8)
                continue
            run, cell = cells[model, length]
            rows.append(f"| {model} | {length} | {run} | {cell['micro_batch_size']} | {cell['learner_peak_gb']:.1f} | "
                        f"{cell['sampler_reserved_gb']:.1f} | {cell['sampler_tokens_per_s']:,.0f} | "
                        f"{cell['learner_tokens_per_s']:,.0f} | {cell['mfu']:.1%} | {cell['step_time_s']:.1f} | "
                        + " ".join(f"{cell[f'perf/time/{p}']:.2f}" for p in PARTS) + " |")
    return rows


if __name__ == "__main__":
    print("\n".join(grid_rows(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parents[1])))
