"""Run a grid sweep from experiments/ without a wandb server, one run after another.

    python experiments/sweep_offline.py experiments/sweep_embedded_dtype_x_algo.yaml --dry-run
    python experiments/sweep_offline.py experiments/sweep_embedded_dtype_x_algo.yaml

Each run gets the command line ``wandb agent`` would build from the sweep file (the
``command`` list with ``${env}``, ``${interpreter}`` and ``${program}`` filled in and
``${args}`` rendered as one ``--name=value`` per parameter), except that its wandb mode
becomes ``offline`` so the run logs locally; ``wandb sync`` uploads those runs later.
"""

from __future__ import annotations

import argparse
import itertools
import shlex
import subprocess
import sys
from pathlib import Path

import yaml


def grid(parameters: dict) -> list[dict]:
    """Every combination of the parameters' ``values`` (a ``value`` is a one-element axis)."""
    names = list(parameters)
    axes = [spec["values"] if "values" in spec else [spec["value"]] for spec in parameters.values()]
    return [dict(zip(names, combo)) for combo in itertools.product(*axes)]


def command_lines(sweep: dict, interpreter: str = "python") -> list[list[str]]:
    """The argv of every run of a grid sweep, in grid order."""
    if sweep.get("method") != "grid":
        raise ValueError(f"only grid sweeps can be expanded offline, got method {sweep.get('method')!r}")
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sweep", type=Path, help="a sweep file from experiments/")
    parser.add_argument("--dry-run", action="store_true", help="print the command lines without running them")
    opts = parser.parse_args()
    sweep = yaml.safe_load(opts.sweep.read_text())
    failed = 0
    for argv in command_lines(sweep, interpreter=sys.executable):
        argv = offline(argv)
        print(shlex.join(argv), flush=True)
        if not opts.dry_run:
            failed += subprocess.run(argv).returncode != 0
    if failed:
        sys.exit(f"{failed} run(s) failed")


if __name__ == "__main__":
    main()
