"""Compare runs: one table of their figures and the reward and mismatch curves, seeds grouped with their range.

``python -m precision_oat.compare RUN_DIR [RUN_DIR …]`` (see :mod:`precision_oat.compare.__main__`);
:func:`compare` is the same from Python (the offline sweep ends with it).
"""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import Optional

from precision_oat.compare.loading import Group, RunRecord, find_runs, group_runs
from precision_oat.compare.stats import WINDOW, window_width
from precision_oat.compare.table import csv_text, markdown

__all__ = ["Group", "RunRecord", "compare", "find_runs", "group_runs"]


def compare(paths: list[Path], *, window: int = WINDOW, plots: bool = True, figures: Path = Path("comparison"),
            title: str = "", markdown_file: Optional[Path] = None, csv_file: Optional[Path] = None,
            log=print) -> list[Group]:
    """Print the table of the runs ``paths`` name, write the files asked for; return the groups compared."""
    from precision_oat.errors import UserError

    if not paths:
        raise UserError("no run given: name one or more run folders (a run's --output-dir) or a sweep's --output-root")
    if window < 1:
        raise UserError(f"--window {window}: a reward window holds at least one step; give 1 or more")
    groups = group_runs(find_runs(paths))
    width = window_width([r for g in groups for r in g.runs], window)
    table = "\n".join(markdown(groups, width, window))
    log(table)
    for flag, path, text in (("--markdown", markdown_file, table + "\n"), ("--csv", csv_file, csv_text(groups, width))):
        if path is not None:
            with writing(flag, path):
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(text)
            log(f"wrote {path}")
    if plots:
        from precision_oat.compare.figures import draw

        with writing("--figures", figures):
            written = draw(groups, figures, title, smooth=width)
        for path in written:
            log(f"wrote {path}")
    return groups


@contextmanager
def writing(flag: str, path: Path):
    """One line naming ``flag`` when its file cannot be written (a folder that cannot be made, no permission)."""
    from precision_oat.runs.folder import cannot_write

    try:
        yield
    except OSError as e:
        raise cannot_write(path, e, flag, "a path") from None
