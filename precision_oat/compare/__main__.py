"""``python -m precision_oat.compare``: the table and figures of runs (see :mod:`precision_oat.compare`).

Examples::

    python -m precision_oat.compare runs/pg-fp16-s0 runs/pg-fp16-s1 runs/pg-bf16-s0
    python -m precision_oat.compare runs/cpu-2x2 --no-plots --csv runs/cpu-2x2/comparison.csv

A folder that is not a run, or a run with no step logged yet, fails in one line.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import tyro

from precision_oat.compare import compare
from precision_oat.compare.stats import WINDOW
from precision_oat.errors import UserError


@dataclass
class CompareArgs:
    """Compare runs: one table (stdout, and optionally markdown and CSV files) and the reward and mismatch figures."""

    # Run folders (a run's --output-dir), folders holding run folders (a sweep's --output-root), or metrics files.
    runs: tyro.conf.Positional[tuple[Path, ...]]
    # Steps in each reward window (the shortest run's steps when it has fewer; the header says so).
    window: int = WINDOW
    # Draw the figures (needs matplotlib).
    plots: bool = True
    # The figures go to PREFIX_reward.png and PREFIX_mismatch.png.
    figures: Path = Path("comparison")
    # Title of the figures.
    title: str = ""
    # Also write the table to this markdown file.
    markdown: Optional[Path] = None
    # Also write one row per run to this CSV file.
    csv: Optional[Path] = None


def cli(argv=None) -> None:
    args = tyro.cli(CompareArgs, args=argv, prog="python -m precision_oat.compare")
    try:
        compare(list(args.runs), window=args.window, plots=args.plots, figures=args.figures, title=args.title,
                markdown_file=args.markdown, csv_file=args.csv)
    except UserError as e:
        sys.exit(f"error: {e}")


if __name__ == "__main__":
    cli()
