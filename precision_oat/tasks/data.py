"""Loading question/answer datasets into :class:`~precision_oat.tasks.task.Example` lists.

A source is, in the order tried: a local ``datasets.save_to_disk`` folder (a ``Dataset``,
or a ``DatasetDict`` plus ``split``); a ``.parquet``, ``.jsonl`` or ``.json`` file; otherwise a
Hugging Face hub id (needs network). A relative path missing from the working directory is
also looked up under the repository root, so the shipped ``data/...`` folders work from
anywhere in a source checkout. ``datasets`` is imported only when a folder or hub id is read.

References are stored as strings. Datasets with several accepted answers per question
(Minerva's answer column is a list) keep them as a tuple of strings; integral floats
(AMC stores ``142.0``) become ``"142"``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Iterable, Optional

from precision_oat.errors import UserError
from precision_oat.tasks.task import Example

REPO_ROOT = Path(__file__).resolve().parents[2]
# The paper's sanity-test set (1,460 MATH problems), shipped with the repository.
DEFAULT_TRAIN = "data/train/math_1k5"
# Oat's evaluation suite: aime, amc, math, minerva, olympiad_bench.
DEFAULT_EVAL_SUITE = "data/evaluation_suite"

_FILE_SUFFIXES = (".parquet", ".jsonl", ".json")
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[A-Za-z0-9][\w.-]*)?$")


class DataNotFoundError(UserError, FileNotFoundError):
    """A data source that is neither a local file or folder nor a hub id that could be loaded."""


def load_examples(
    source: str,
    *,
    split: Optional[str] = "train",
    input_key: str = "problem",
    output_key: str = "answer",
    limit: Optional[int] = None,
    flag: str = "--prompt-data",
) -> list[Example]:
    """The first ``limit`` rows (all when None) of ``source`` as examples, in file order.

    ``flag`` is the command-line flag that named ``source``, for the error messages.
    """
    rows, columns = _read_rows(source, split, flag)
    if not rows:
        raise UserError(f"{flag} {source}: holds no rows" + (f" in split {split!r}" if split else ""))
    _check_columns(source, columns, input_key, output_key)
    if limit is not None:
        rows = rows[:limit]
    # A file's columns are read off its first row; any row may lack a value (a null becomes no answer, not "None").
    for number, row in enumerate(rows, 1):
        for key, key_flag in ((input_key, "--input-key"), (output_key, "--output-key")):
            if not isinstance(row, dict) or row.get(key) is None:
                raise UserError(f"{flag} {source}: row {number} has no value in column {key!r} ({key_flag}); "
                                "fill in or drop that row")
    return [Example(question=str(row[input_key]), reference=as_reference(row[output_key])) for row in rows]


def load_eval_suite(
    path: str = DEFAULT_EVAL_SUITE,
    benchmarks: Optional[list[str]] = None,
    input_key: str = "problem",
    output_key: str = "answer",
    limit: Optional[int] = None,
) -> dict[str, list[Example]]:
    """Benchmark name -> examples, from a ``DatasetDict`` whose splits are the benchmarks."""
    found = _split_names(path)
    chosen = list(found) if benchmarks is None else list(benchmarks)
    unknown = [b for b in chosen if b not in found]
    if unknown:
        raise UserError(
            f"--eval-benchmarks {' '.join(unknown)}: not in --eval-data {path}; available: {', '.join(found)}"
        )
    return {
        b: load_examples(path, split=b, input_key=input_key, output_key=output_key, limit=limit, flag="--eval-data")
        for b in chosen
    }


def as_reference(value: Any) -> str | tuple[str, ...]:
    """A dataset answer cell as a reference string, or a tuple when it lists several answers."""
    if isinstance(value, (list, tuple)):
        answers = list(dict.fromkeys(as_reference(v) for v in value))
        flat = [a for a in answers if isinstance(a, str)]
        return flat[0] if len(flat) == 1 else tuple(flat)
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value).strip()


def resolve_path(source: str) -> Optional[Path]:
    """``source`` as an existing local path (cwd first, then the repository root), or None."""
    path = Path(source).expanduser()
    if path.exists():
        return path
    if not path.is_absolute() and (REPO_ROOT / path).exists():
        return REPO_ROOT / path
    return None


def _read_rows(source: str, split: Optional[str], flag: str) -> tuple[list[dict], list[str]]:
    path = _existing_or_hub_id(source, flag)
    if path is not None and path.is_file():
        rows = _read_file(path, flag)
        columns = list(rows[0]) if rows else []
        return rows, columns
    data = _open_dataset(str(path) if path is not None else source, flag)
    data = _pick_split(source, data, split)
    return data.to_list(), list(data.column_names)


def _existing_or_hub_id(source: str, flag: str) -> Optional[Path]:
    """``source`` as a local path, or None when it can only be a hub id; fails when it is neither."""
    path = resolve_path(source)
    if path is None and Path(source).suffix in _FILE_SUFFIXES:
        raise DataNotFoundError(f"{flag} {source}: data file does not exist; check the path (relative to here or the repository)")
    if path is None and not _HUB_ID.match(source):
        raise DataNotFoundError(
            f"{flag} {source}: is neither an existing path nor a Hugging Face hub id; pass a .parquet/.jsonl/.json "
            "file, a datasets folder or an org/name hub id"
        )
    return path


def _read_file(path: Path, flag: str) -> list[dict]:
    if path.suffix not in _FILE_SUFFIXES:
        raise UserError(f"{flag} {path}: unsupported data file; expected one of {', '.join(_FILE_SUFFIXES)} or a folder")
    try:
        if path.suffix == ".parquet":
            import pyarrow.parquet as pq

            return pq.read_table(path).to_pylist()
        if path.suffix == ".jsonl":
            with path.open() as f:
                return [json.loads(line) for line in f if line.strip()]
        data = json.loads(path.read_text())
    except ValueError as e:  # json.JSONDecodeError, pyarrow.ArrowInvalid
        raise UserError(f"{flag} {path}: not a readable {path.suffix} file ({' '.join(str(e).split())})") from None
    if isinstance(data, dict):  # column-oriented: {"problem": [...], "answer": [...]}
        if not all(isinstance(column, list) for column in data.values()) or len({len(c) for c in data.values()}) > 1:
            raise UserError(f"{flag} {path}: an object of columns needs one list per column, all of one length")
        data = [dict(zip(data, values)) for values in zip(*data.values())]
    if not isinstance(data, list) or not all(isinstance(row, dict) for row in data):
        raise UserError(f"{flag} {path}: expected a list of row objects or an object of columns")
    return data


def _open_dataset(source: str, flag: str):
    import datasets

    path = Path(source)
    try:
        if path.is_dir() and ((path / "dataset_dict.json").exists() or (path / "dataset_info.json").exists()):
            return datasets.load_from_disk(source)
        # A folder of data files, or a hub id.
        return datasets.load_dataset(source)
    except OSError as e:  # not on the hub, no network, unreadable folder
        raise DataNotFoundError(f"{flag} {source}: could not be loaded ({' '.join(str(e).split())})") from None


def _split_names(source: str) -> list[str]:
    path = _existing_or_hub_id(source, "--eval-data")
    if path is not None and path.is_file():
        raise UserError(
            f"--eval-data {source}: a data file holds a single dataset; an evaluation suite is a datasets folder "
            "(save_to_disk of a DatasetDict) or hub id with one split per benchmark"
        )
    data = _open_dataset(str(path) if path is not None else source, "--eval-data")
    if not hasattr(data, "keys"):
        raise UserError(
            f"--eval-data {source}: holds a single dataset; an evaluation suite needs one split per benchmark"
        )
    return list(data.keys())


def _pick_split(source: str, data, split: Optional[str]):
    if not hasattr(data, "keys"):  # a single Dataset: there is nothing to choose
        return data
    names = list(data.keys())
    if split is None:
        if len(names) == 1:
            return data[names[0]]
        raise UserError(f"{source} has splits {', '.join(names)}; choose one with --train-split")
    if split not in data:
        raise UserError(f"--train-split {split}: not in {source}; available splits: {', '.join(names)}")
    return data[split]


def _check_columns(source: str, columns: Iterable[str], input_key: str, output_key: str) -> None:
    columns = list(columns)
    for key, flag in ((input_key, "--input-key"), (output_key, "--output-key")):
        if key not in columns:
            raise UserError(
                f"{flag} {key}: column {key!r} not in {source}; available columns: {', '.join(columns)}"
            )
