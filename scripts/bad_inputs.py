"""Run bad inputs through ``python -m precision_oat.main`` and count how each run ends.

    .venv/bin/python scripts/bad_inputs.py [--jobs 2] [--verbose]

The inputs are the table of ``tests/test_bad_inputs.py`` plus the extra ones below (values
tyro itself refuses, missing optional stacks, bad data files, run folders that must not be
written over or resumed as asked). Each run gets
``--steps 1 --wandb-mode disabled --output-dir <tmp>`` and ends in one of:

    error line    exit ≠ 0, no traceback, last stderr line "error: …" naming the flag
    usage error   exit ≠ 0, no traceback, tyro's usage panel (unknown flag or choice, wrong type)
    unclear       exit ≠ 0, no traceback, but the last line is neither of the above
    traceback     a Python traceback on stderr
    accepted      exit 0: the run went ahead
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.test_bad_inputs import BAD_INPUTS, Bad, bad, command  # noqa: E402

EXTRA: list[Bad] = [
    # tyro's parser refuses these before any check runs.
    bad("--algo", "foo"),
    bad("--dtype", "fp8"),
    bad("--steps", "many"),
    bad("--steps", "1.5"),
    bad("--tempreature", "1", flag="--tempreature"),
    # Optional stacks this environment may lack.
    bad("--backend", "oat", "--dtype", "bf16", flag="--backend"),
    bad("--sampler", "vllm", flag="--sampler"),
    # Data the math task reads after the model loads.
    bad("--task", "math", "--prompt-data", "missing.jsonl", flag="--prompt-data"),
    bad("--task", "math", "--prompt-data", "data/train/math_1k5", "--input-key", "question", flag="--input-key"),
    bad("--task", "math", "--eval-every", "1", "--eval-data", "no/such/suite", flag="--eval-data"),
    bad("--task", "math", "--eval-every", "1", "--eval-benchmarks", "gsm8k", flag="--eval-benchmarks"),
    # A length limit no right answer fits in, measured in the model's tokens.
    bad("--task", "counting", "--max-new-tokens", "8", flag="--max-new-tokens"),
    # Run folders: a finished one-step run made by the base command, copied per row.
    bad("--output-dir", "{run}", flag="--output-dir", output_dir=False),
    bad("--output-dir", "{run}", "--resume", "--learning-rate", "1e-3", flag="--learning-rate", output_dir=False),
    bad("--output-dir", "{run}", "--resume", "--steps", "0", flag="--steps", output_dir=False),
    bad("--output-dir", "{run without config}", "--resume", flag="--resume", output_dir=False),
    bad("--output-dir", "{torn run}", "--resume", flag="--resume", output_dir=False),
    bad("--output-dir", "no/such/run", "--resume", flag="--resume", output_dir=False),
]


def finished_run(folder: Path) -> Path:
    """A run of the base command, finished (``--steps 1``), in ``folder``."""
    proc = subprocess.run([sys.executable, "-m", "precision_oat.main", *command(bad(), folder)], cwd=folder,
                          capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        sys.exit(f"the base command failed:\n{proc.stderr}")
    return folder / "run"


def without_config(run: Path) -> None:
    (run / "config.json").unlink()


def torn(run: Path) -> None:
    for state in run.glob("checkpoints/step_*/trainer_state.pt"):
        state.write_bytes(state.read_bytes()[: state.stat().st_size // 2])


# Placeholder → how the copy of the finished run is spoilt.
RUN_FOLDERS = {"{run}": None, "{run without config}": without_config, "{torn run}": torn}


def with_run_folders(row: Bad, folder: Path, finished: Path) -> Bad:
    """``row`` with each run placeholder replaced by a copy of ``finished`` made in ``folder``."""
    argv = []
    for token in row.argv:
        if token in RUN_FOLDERS:
            copy = folder / "existing"
            shutil.copytree(finished, copy)
            if RUN_FOLDERS[token] is not None:
                RUN_FOLDERS[token](copy)
            token = str(copy)
        argv.append(token)
    return dataclasses.replace(row, argv=tuple(argv))

OUTCOMES = ("error line", "usage error", "unclear", "traceback", "accepted")


def outcome(row: Bad, returncode: int, stderr: str) -> str:
    if "Traceback" in stderr:
        return "traceback"
    if returncode == 0:
        return "accepted"
    lines = [line for line in stderr.splitlines() if line.strip()]
    last = lines[-1] if lines else ""
    if last.startswith("error: ") and row.flag in last:
        return "error line"
    if "╰" in last or "usage:" in stderr or "Unrecognized" in stderr:
        return "usage error"
    return "unclear"


def run(row: Bad, folder: Path, finished: Path) -> tuple[Bad, str, str]:
    folder.mkdir(parents=True)
    argv = command(with_run_folders(row, folder, finished), folder)
    proc = subprocess.run([sys.executable, "-m", "precision_oat.main", *argv], cwd=folder,
                          capture_output=True, text=True, timeout=600)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    return row, outcome(row, proc.returncode, proc.stderr), lines[-1] if lines else f"(exit {proc.returncode})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=2, help="runs at a time")
    parser.add_argument("--verbose", action="store_true", help="print every run's outcome and last stderr line")
    parser.add_argument("--table-only", action="store_true", help="skip the extra inputs")
    opts = parser.parse_args()
    rows = BAD_INPUTS + ([] if opts.table_only else EXTRA)
    with tempfile.TemporaryDirectory() as tmp, ThreadPoolExecutor(opts.jobs) as pool:
        finished = finished_run(Path(tmp) / "finished")
        results = list(pool.map(lambda ir: run(ir[1], Path(tmp) / f"row{ir[0]}", finished), enumerate(rows)))
    counts = collections.Counter(kind for _, kind, _ in results)
    for row, kind, last in results:
        if opts.verbose or kind in ("unclear", "traceback", "accepted"):
            print(f"{kind:12} {row.id}\n             {last[:200]}")
    print(f"{len(rows)} bad inputs through the CLI ({len(BAD_INPUTS)} from the table, {len(rows) - len(BAD_INPUTS)} extra):")
    for kind in OUTCOMES:
        print(f"  {kind:12} {counts.get(kind, 0)}")


if __name__ == "__main__":
    main()
