"""Draws the precision atlas's figure from lab runs (their mismatch.json files, arms in the order given).

    python benchmarks/atlas_figure.py benchmarks/results/h200_atlas/{math,math-rest,invariant}/mismatch.json \\
        --output docs/figures/h200_atlas_math.png

One lab run draws its own atlas.png; this joins the arms of several (an atlas measured over more than one run).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from precision_oat.lab.lab import labelled_arms
from precision_oat.lab.plots import plot_atlas


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("reports", nargs="+", type=Path, help="the lab runs' mismatch.json files")
    parser.add_argument("--output", type=Path, required=True, help="the PNG to write")
    args = parser.parse_args(argv)
    arms: dict[str, dict] = {}
    for report in args.reports:
        arms.update(labelled_arms(json.loads(report.read_text())))
    plot_atlas(arms, args.output)
    print(f"wrote {args.output}: {', '.join(arms)}")


if __name__ == "__main__":
    main()
