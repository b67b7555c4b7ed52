"""What the scripts that time parts of a run share (benchmarks/weight_sync.py, benchmarks/sampler_host.py): their
own flags beside the run's, and the JSON of their figures."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional, Sequence


def script_and_run_args(parser, argv: Optional[Sequence[str]] = None):
    """A script's own flags (``parser``, with ``--repeats`` and ``--output``) and the run's flags that follow them,
    after ``--``. Returns (the script's namespace, the run's flags as given, the run's
    :class:`~precision_oat.args.Args`); a bad flag of either exits in one line."""
    from precision_oat.presets import parse_args

    ours, run_flags = parser.parse_known_args(argv)
    if ours.repeats < 1:
        parser.error(f"--repeats {ours.repeats}: must be at least 1")
    return ours, run_flags, parse_args([f for f in run_flags if f != "--"])


def figures(ours, run_flags: list[str], device, **results) -> dict:
    """The script's figures with the settings they were measured under, written to ``--output`` when given."""
    result = {"settings": {"flags": run_flags, "repeats": ours.repeats, "device": str(device)}, **results}
    if ours.output is not None:
        Path(ours.output).parent.mkdir(parents=True, exist_ok=True)
        Path(ours.output).write_text(json.dumps(result, indent=2))
    return result
