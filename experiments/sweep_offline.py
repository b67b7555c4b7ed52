"""Run a grid sweep from experiments/ without a wandb server, one run after another, and compare the runs.

    python experiments/sweep_offline.py experiments/sweep_cpu_2x2.yaml --dry-run
    python experiments/sweep_offline.py experiments/sweep_cpu_2x2.yaml --output-root runs/cpu-2x2 --steps 10

Each run gets the command line ``wandb agent`` would build from the sweep file (the
``command`` list with ``${env}``, ``${interpreter}`` and ``${program}`` filled in and
``${args}`` rendered as one ``--name=value`` per parameter), except that its wandb mode
becomes ``offline`` so the run logs locally; ``wandb sync`` uploads those runs later.
Then ``--output-dir OUTPUT_ROOT/NAME`` (NAME: the grid point's values joined by "-"), then
every flag this script does not know, passed through to every run after the grid's own (so
``--steps 10`` or ``--wandb-mode disabled`` wins over the sweep file's). When the runs have
ended, ``precision_oat.compare`` prints the table of those that logged a step and writes
OUTPUT_ROOT/comparison.md, comparison.csv and, unless ``--no-plots``, comparison_reward.png
and comparison_mismatch.png.
"""

from __future__ import annotations

import argparse
import itertools
import shlex
import subprocess
import sys
import time
from pathlib import Path

import yaml

from precision_oat.compare import compare
from precision_oat.errors import UserError
from precision_oat.presets import parse_args
from precision_oat.runs.log import read_metrics


def read_sweep(path: Path) -> dict:
    """The sweep file at ``path``, checked for what the offline runner needs; a UserError naming the file and the
    fix where it falls short."""
    if not path.is_file():
        what = "is a folder" if path.is_dir() else "does not exist"
        raise UserError(f"{path} {what}; give a sweep file, e.g. experiments/sweep_cpu_2x2.yaml")
    try:
        sweep = yaml.safe_load(path.read_text())
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        raise UserError(f"{path}: not valid YAML{where} ({getattr(e, 'problem', None) or e})") from None
    if not isinstance(sweep, dict):
        raise UserError(f"{path}: holds no sweep (a mapping with method, command and parameters)")
    if sweep.get("method") != "grid":
        raise UserError(f"{path}: method {sweep.get('method')!r}; only grid sweeps can be run offline")
    command = sweep.get("command")
    if not isinstance(command, list) or "${args}" not in command or not any(
            command[i:i + 2] == ["-m", "precision_oat.main"] for i in range(len(command))):
        raise UserError(f"{path}: its command list must run -m precision_oat.main with ${{args}} "
                        "(see experiments/sweep_cpu_2x2.yaml)")
    parameters = sweep.get("parameters")
    if not isinstance(parameters, dict) or not parameters:
        raise UserError(f"{path}: no parameters to sweep; give each flag a values list (or one value)")
    for name, spec in parameters.items():
        if not (isinstance(spec, dict) and ("value" in spec or isinstance(spec.get("values"), list) and spec["values"])):
            raise UserError(f"{path}: parameter {name} needs a non-empty values list, or one value")
    return sweep


def grid(parameters: dict) -> list[dict]:
    """Every combination of the parameters' ``values`` (a ``value`` is a one-element axis)."""
    names = list(parameters)
    axes = [spec["values"] if "values" in spec else [spec["value"]] for spec in parameters.values()]
    return [dict(zip(names, combo)) for combo in itertools.product(*axes)]


def command_lines(sweep: dict, interpreter: str = "python") -> list[list[str]]:
    """The argv of every run of a grid sweep, in grid order."""
    macros = {"${env}": ["/usr/bin/env"], "${interpreter}": [interpreter], "${program}": [sweep.get("program", "")]}
    out = []
    for point in grid(sweep["parameters"]):
        argv = []
        for chunk in sweep["command"]:
            chunk = str(chunk)
            argv += [f"--{k}={v}" for k, v in point.items()] if chunk == "${args}" else macros.get(chunk, [chunk])
        out.append(argv)
    return out


def offline(argv: list[str]) -> list[str]:
    """``argv`` with its wandb mode replaced by ``offline``."""
    out, skip = [], False
    for token in argv:
        if skip:
            skip = False
        elif token in ("--wandb-mode", "--wandb_mode"):
            skip = True
        elif not token.startswith(("--wandb-mode=", "--wandb_mode=")):
            out.append(token)
    return out + ["--wandb-mode=offline"]


def run_name(point: dict) -> str:
    """A grid point's folder under the output root: its values in the sweep's parameter order, joined by "-"
    (a "/" in a value, a preset's path, becomes "_")."""
    return "-".join(str(v).replace("/", "_") for v in point.values())


def runs_of(sweep: dict, root: Path, extra: list[str], interpreter: str) -> list[tuple[Path, list[str]]]:
    """(folder, argv) of every grid point: the grid's command, wandb offline, the folder, then ``extra``."""
    if any(token.split("=")[0] in ("--output-dir", "--output_dir") for token in extra):
        raise UserError("--output-dir: each run's folder is OUTPUT_ROOT/NAME; give --output-root instead")
    points = grid(sweep["parameters"])
    return [(root / run_name(point), [*offline(argv), f"--output-dir={root / run_name(point)}", *extra])
            for point, argv in zip(points, command_lines(sweep, interpreter))]


def main_argv(argv: list[str]) -> list[str]:
    """The flags of ``python -m precision_oat.main`` in a run's argv."""
    i = next(i for i in range(len(argv)) if argv[i:i + 2] == ["-m", "precision_oat.main"])
    return argv[i + 2:]


def command_line() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False,
                                     epilog="Any other flag is passed to every run, after the grid's own.")
    parser.add_argument("sweep", type=Path, help="a sweep file from experiments/")
    parser.add_argument("--dry-run", action="store_true", help="print the command lines without running them")
    parser.add_argument("--output-root", type=Path,
                        help="the runs go to OUTPUT_ROOT/NAME (default runs/<the sweep's name>-<time>)")
    parser.add_argument("--no-plots", action="store_true", help="end with the comparison's table only, no figures")
    return parser


def main(argv=None) -> None:
    opts, extra = command_line().parse_known_args(argv)
    try:
        sweep = read_sweep(opts.sweep)
        name = sweep.get("name", opts.sweep.stem)
        root = opts.output_root or Path("runs") / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}"
        runs = runs_of(sweep, root, extra, sys.executable)
    except UserError as e:
        sys.exit(f"error: {e}")
    for _, argv in runs:
        parse_args(main_argv(argv))  # a flag the runs refuse stops the sweep here, in one line, before any run
    failed = []
    for folder, argv in runs:
        print(shlex.join(argv), flush=True)
        if not opts.dry_run and subprocess.run(argv).returncode != 0:
            failed.append(folder.name)
    if opts.dry_run:
        return
    # A training step, not any row: a --steps 0 run logs its evaluation alone, which the comparison cannot take.
    logged = [folder for folder, _ in runs if (folder / "metrics.jsonl").is_file()
              and any("reward/mean" in row for row in read_metrics(folder / "metrics.jsonl"))]
    if logged:
        print(f"\ncomparison of the {len(logged)} runs that logged a step:", flush=True)
        try:
            compare(logged, plots=not opts.no_plots, figures=root / "comparison",
                    markdown_file=root / "comparison.md", csv_file=root / "comparison.csv")
        except UserError as e:
            sys.exit(f"error: {e}")
    if failed:
        sys.exit(f"{len(failed)} run(s) failed: {', '.join(failed)}")


if __name__ == "__main__":
    main()
