"""The shipped datasets and the loader's sources and errors."""

import json

import pytest

from precision_oat.tasks.data import DEFAULT_EVAL_SUITE, DEFAULT_TRAIN, as_reference, load_eval_suite, load_examples
from precision_oat.tasks.task import Example


def test_sanity_train_set_has_1460_problems():
    examples = load_examples(DEFAULT_TRAIN, split="train", input_key="problem", output_key="answer")
    assert len(examples) == 1460
    assert all(isinstance(e.question, str) and e.question for e in examples)
    assert examples[0].reference == "0"


def test_eval_suite_sizes():
    suite = load_eval_suite(DEFAULT_EVAL_SUITE)
    assert {name: len(examples) for name, examples in suite.items()} == {
        "aime": 30,
        "amc": 83,
        "math": 500,
        "minerva": 272,
        "olympiad_bench": 675,
    }


def test_eval_suite_references_are_normalised():
    suite = load_eval_suite(DEFAULT_EVAL_SUITE, benchmarks=["amc", "minerva", "olympiad_bench"])
    # AMC stores floats: 142.0 becomes "142".
    assert all(isinstance(e.reference, str) and not e.reference.endswith(".0") for e in suite["amc"])
    # Minerva lists several accepted answers for some questions; duplicates and newlines go.
    multi = [e.reference for e in suite["minerva"] if isinstance(e.reference, tuple)]
    assert multi and all(len(r) >= 2 and not any(a.endswith("\n") for a in r) for r in multi)
    # OlympiadBench lists exactly one.
    assert all(isinstance(e.reference, str) for e in suite["olympiad_bench"])


def test_as_reference():
    assert as_reference(142.0) == "142"
    assert as_reference(0.5) == "0.5"
    assert as_reference(["4", "4\n"]) == "4"
    assert as_reference(["0.01\n", "0.02\n"]) == ("0.01", "0.02")


def test_limit_and_unknown_benchmark():
    assert len(load_eval_suite(DEFAULT_EVAL_SUITE, ["math"], limit=7)["math"]) == 7
    with pytest.raises(ValueError, match="available: aime, amc, math, minerva, olympiad_bench"):
        load_eval_suite(DEFAULT_EVAL_SUITE, ["gsm8k"])


def test_missing_column_names_column_flag_and_existing_columns():
    with pytest.raises(ValueError) as err:
        load_examples(DEFAULT_TRAIN, split="train", input_key="question", output_key="answer")
    message = str(err.value)
    assert "'question'" in message and "--input-key" in message and "problem, answer" in message
    with pytest.raises(ValueError, match="--output-key"):
        load_examples(DEFAULT_TRAIN, split="train", input_key="problem", output_key="solution")


def test_missing_split_lists_available_splits():
    with pytest.raises(ValueError, match="available splits: train"):
        load_examples(DEFAULT_TRAIN, split="test", input_key="problem", output_key="answer")
    with pytest.raises(ValueError, match="choose one"):
        load_examples(DEFAULT_EVAL_SUITE, split=None, input_key="problem", output_key="answer")


def test_missing_path_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="neither an existing path nor"):
        load_examples(str(tmp_path / "nope" / "deeper"), split="train", input_key="q", output_key="a")
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_examples("missing.jsonl", split=None, input_key="q", output_key="a")


ROWS = [{"q": "1+1?", "a": "2", "extra": 0}, {"q": "Half of 1?", "a": "\\frac{1}{2}", "extra": 1}]
EXPECTED = [Example("1+1?", "2"), Example("Half of 1?", "\\frac{1}{2}")]


def test_jsonl_round_trip(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in ROWS) + "\n")
    assert load_examples(str(path), split=None, input_key="q", output_key="a") == EXPECTED


def test_json_round_trip(tmp_path):
    path = tmp_path / "d.json"
    path.write_text(json.dumps(ROWS))
    assert load_examples(str(path), split=None, input_key="q", output_key="a", limit=1) == EXPECTED[:1]


def test_parquet_round_trip(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "d.parquet"
    pq.write_table(pa.Table.from_pylist(ROWS), path)
    assert load_examples(str(path), split=None, input_key="q", output_key="a") == EXPECTED
    with pytest.raises(ValueError, match="available columns: q, a, extra"):
        load_examples(str(path), split=None, input_key="question", output_key="a")


def test_save_to_disk_dataset_round_trip(tmp_path):
    import datasets

    datasets.Dataset.from_list(ROWS).save_to_disk(str(tmp_path / "ds"))
    assert load_examples(str(tmp_path / "ds"), split=None, input_key="q", output_key="a") == EXPECTED


def test_importing_the_loader_does_not_import_datasets():
    import subprocess
    import sys

    code = "import sys, precision_oat.tasks.data; assert 'datasets' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_a_row_without_a_value_is_refused_in_one_line(tmp_path):
    # The columns come from the first row; a later row without the answer, or with a null one, is no example.
    missing, null = tmp_path / "missing.jsonl", tmp_path / "null.jsonl"
    missing.write_text(json.dumps(ROWS[0]) + "\n" + json.dumps({"q": "3+4?"}) + "\n")
    null.write_text(json.dumps(ROWS[0]) + "\n" + json.dumps({"q": "3+4?", "a": None}) + "\n")
    for path in (missing, null):
        with pytest.raises(ValueError, match=r"row 2 has no value in column 'a' \(--output-key\)"):
            load_examples(str(path), split=None, input_key="q", output_key="a")


def test_columns_of_different_lengths_are_refused(tmp_path):
    # zip() would drop the questions past the shortest column without a word.
    path = tmp_path / "d.json"
    path.write_text(json.dumps({"q": ["1+1?", "2+2?"], "a": ["2"]}))
    with pytest.raises(ValueError, match="one list per column, all of one length"):
        load_examples(str(path), split=None, input_key="q", output_key="a")


def test_an_evaluation_suite_that_is_a_file_is_refused_for_what_it_is(tmp_path):
    path = tmp_path / "suite.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in ROWS) + "\n")
    with pytest.raises(ValueError, match="--eval-data .*suite.jsonl: a data file holds a single dataset"):
        load_eval_suite(str(path), input_key="q", output_key="a")
