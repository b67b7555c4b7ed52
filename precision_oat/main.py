"""Command line: ``python -m precision_oat.main --algo pg --dtype fp16 [flags | --preset FILE]``.

With no flags it trains the embedded tiny arithmetic policy on this machine (CPU or one
GPU) and prints where its metrics and checkpoints went. ``--help`` lists every flag.
"""

from __future__ import annotations

import sys
from typing import Optional, Sequence

from precision_oat.args import Args
from precision_oat.distributed.world import end_process_of_finished_run
from precision_oat.errors import UserError
from precision_oat.presets import parse_args


def run(args: Args) -> dict:
    if args.backend == "oat":
        from precision_oat.backends.oat.program import run as run_oat

        return run_oat(args)
    from precision_oat.backends.local.driver import train

    return train(args)


def cli(argv: Optional[Sequence[str]] = None) -> None:
    args = parse_args(argv)
    try:
        run(args)
    except UserError as e:
        # Bad input is reported in one line; anything else is a bug and keeps its traceback.
        sys.exit(f"error: {e}")


if __name__ == "__main__":
    cli()
    # Only as the process ends: a process that calls cli() from Python goes on.
    end_process_of_finished_run()
