"""The wandb sweeps in experiments/ expand into command lines our parser accepts.

``wandb agent`` builds each run's argv from the sweep's ``command`` list: ``${env}`` becomes
``/usr/bin/env``, ``${interpreter}`` ``python`` and ``${args}`` one ``--name=value`` token
per parameter (wandb's ``create_sweep_command_args``). The rendering is restated here so
that the test checks our files against wandb's rules, not against our own helper.
"""

from __future__ import annotations

import csv
import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from precision_oat.algorithms import RECIPES
from precision_oat.args import AlgorithmArgs, algorithm_spec
from precision_oat.presets import load_preset, parse_args
from tests.conftest import load_script

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONWARNINGS": "ignore",
       "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
SWEEPS = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "experiments").glob("sweep_*.yaml"))
MODULE = ["-m", "precision_oat.main"]


def _load(path: str) -> dict:
    return yaml.safe_load((ROOT / path).read_text())


def _points(sweep: dict) -> list[dict]:
    params = sweep["parameters"]
    axes = [spec["values"] if "values" in spec else [spec["value"]] for spec in params.values()]
    return [dict(zip(params, combo)) for combo in itertools.product(*axes)]


def _render(sweep: dict, point: dict) -> list[str]:
    macros = {"${env}": ["/usr/bin/env"], "${interpreter}": ["python"]}
    argv = []
    for chunk in map(str, sweep["command"]):
        if chunk == "${args}":
            argv += [f"--{name}={value}" for name, value in point.items()]
        else:
            argv += macros.get(chunk, [chunk])
    return argv


def _main_argv(argv: list[str]) -> list[str]:
    i = next(i for i in range(len(argv)) if argv[i : i + 2] == MODULE)
    return argv[i + 2 :]


def _runs(path: str) -> list[tuple[dict, list[str]]]:
    sweep = _load(path)
    return [(point, _render(sweep, point)) for point in _points(sweep)]


def test_sweep_files_exist():
    assert {"experiments/sweep_sanity_dtype_x_algo.yaml", "experiments/sweep_embedded_dtype_x_algo.yaml",
            "experiments/sweep_cpu_2x2.yaml"} <= set(SWEEPS)


@pytest.mark.parametrize("path", SWEEPS)
def test_sweep_is_a_grid_run_as_a_module(path):
    sweep = _load(path)
    assert sweep["method"] == "grid"
    command = list(map(str, sweep["command"]))
    assert command[:4] == ["${env}", "${interpreter}", *MODULE]
    assert command.count("${args}") == 1


@pytest.mark.parametrize("path", SWEEPS)
def test_every_rendered_command_parses_with_the_swept_values(path):
    runs = _runs(path)
    assert len({tuple(argv) for _, argv in runs}) == len(runs)
    for point, argv in runs:
        assert argv[:2] == ["/usr/bin/env", "python"]
        args = parse_args(_main_argv(argv))
        assert args.precision.dtype == point["dtype"], argv
        assert args.algorithm.algo == point["algo"], argv
        # The finer flags stay unset, so each run is exactly its recipe.
        assert args.algorithm == AlgorithmArgs(algo=point["algo"])
        algorithm_spec(args)
        args.precision.build()
        assert args.log.wandb_mode == "online", "a sweep run must report to the sweep"


def test_sanity_sweep_is_fp16_bf16_times_five_algorithms_on_the_sanity_preset():
    runs = _runs("experiments/sweep_sanity_dtype_x_algo.yaml")
    assert {(p["dtype"], p["algo"]) for p, _ in runs} == set(
        itertools.product(["fp16", "bf16"], ["grpo", "grpo-tis", "grpo-mis", "gspo", "pg"])
    )
    preset = load_preset(ROOT / "args/sanity/fp16_grpo.yaml")
    for point, argv in runs:
        assert _main_argv(argv)[:2] == ["--preset", "args/sanity/fp16_grpo.yaml"]
        assert f"--dtype={point['dtype']}" in argv and f"--algo={point['algo']}" in argv
        args = parse_args(_main_argv(argv))
        assert args.backend == "oat"
        # Everything but the swept axes comes from the preset.
        assert (args.model, args.task, args.rollout, args.train, args.eval, args.lora) == (
            preset.model, preset.task, preset.rollout, preset.train, preset.eval, preset.lora)


def test_embedded_sweep_is_every_recipe_times_every_dtype_on_cpu():
    runs = _runs("experiments/sweep_embedded_dtype_x_algo.yaml")
    assert {(p["dtype"], p["algo"]) for p, _ in runs} == set(itertools.product(["fp16", "bf16", "fp32"], RECIPES))
    for _, argv in runs:
        assert not any(token.startswith("--preset") for token in argv)
        args = parse_args(_main_argv(argv))
        assert args.model.model is None and args.task.task == "arithmetic"
        assert args.train.device == "cpu" and args.backend == "local"


@pytest.mark.parametrize("path", SWEEPS)
def test_rendering_matches_wandb(path):
    utils = pytest.importorskip("wandb.sdk.launch.sweeps.utils")
    sweep = _load(path)
    # Each macro is one token, so ${args} sits at the same index in the command and the argv.
    i = list(map(str, sweep["command"])).index("${args}")
    empty = _render(sweep, {})
    for point, argv in _runs(path):
        # The agent receives {"name": {"value": v}} per parameter.
        flags = utils.create_sweep_command_args({"args": {k: {"value": v} for k, v in point.items()}})["args"]
        assert argv == empty[:i] + flags + empty[i:]


@pytest.mark.parametrize("path", SWEEPS)
def test_offline_runner_builds_the_same_commands(path):
    sweep_offline = load_script("experiments/sweep_offline.py")
    assert sweep_offline.command_lines(_load(path)) == [argv for _, argv in _runs(path)]
    for _, argv in _runs(path):
        assert parse_args(_main_argv(sweep_offline.offline(argv))).log.wandb_mode == "offline"


def test_cpu_sweep_is_pg_and_grpo_times_fp16_and_bf16_on_cpu_named_algo_dtype():
    runs = _runs("experiments/sweep_cpu_2x2.yaml")
    assert [(p["algo"], p["dtype"]) for p, _ in runs] == [("pg", "fp16"), ("pg", "bf16"), ("grpo", "fp16"),
                                                          ("grpo", "bf16")]
    sweep_offline = load_script("experiments/sweep_offline.py")
    assert [sweep_offline.run_name(p) for p, _ in runs] == ["pg-fp16", "pg-bf16", "grpo-fp16", "grpo-bf16"]
    for _, argv in runs:
        args = parse_args(_main_argv(argv))
        assert args.model.model is None and args.task.task == "arithmetic"
        assert args.train.device == "cpu" and args.backend == "local"


def test_offline_flags_reach_every_run_after_the_grids_own(tmp_path):
    sweep_offline = load_script("experiments/sweep_offline.py")
    sweep = _load("experiments/sweep_cpu_2x2.yaml")
    extra = ["--steps", "3", "--prompts-per-step=2", "--wandb-mode", "disabled"]
    for (folder, argv), (point, _) in zip(sweep_offline.runs_of(sweep, tmp_path, extra, "python"), _runs(
            "experiments/sweep_cpu_2x2.yaml")):
        assert folder == tmp_path / f"{point['algo']}-{point['dtype']}"
        args = parse_args(sweep_offline.main_argv(argv))
        assert (args.algorithm.algo, args.precision.dtype) == (point["algo"], point["dtype"])
        assert (args.train.steps, args.rollout.prompts_per_step) == (3, 2)
        assert args.log.output_dir == folder and args.log.wandb_mode == "disabled", "the flags given win"
    [(_, argv), *_] = sweep_offline.runs_of(sweep, tmp_path, [], "python")
    assert parse_args(sweep_offline.main_argv(argv)).log.wandb_mode == "offline"


@pytest.mark.parametrize("flags, error", [
    (["--output-dir", "x"], "error: --output-dir: each run's folder is OUTPUT_ROOT/NAME; give --output-root instead"),
    (["--steps", "-1"], "error: --steps -1:"),
])
def test_a_flag_the_runs_refuse_stops_the_sweep_before_any_run(flags, error, tmp_path):
    done = subprocess.run([sys.executable, "experiments/sweep_offline.py", "experiments/sweep_cpu_2x2.yaml",
                           "--output-root", str(tmp_path / "root"), *flags], cwd=ROOT, env=ENV, capture_output=True,
                          text=True)
    assert done.returncode != 0 and done.stdout == "", done.stdout
    assert done.stderr.splitlines()[-1].startswith(error), done.stderr
    assert not (tmp_path / "root").exists()


def test_the_offline_sweep_runs_the_grid_and_ends_in_the_comparison(embedded_policy_dir, tmp_path):
    root = tmp_path / "root"
    tiny = ["--model", str(embedded_policy_dir), "--steps", "2", "--prompts-per-step", "2", "--num-samples", "2",
            "--max-new-tokens", "4", "--probe-dtypes", "--wandb-mode", "disabled"]
    done = subprocess.run([sys.executable, "experiments/sweep_offline.py", "experiments/sweep_cpu_2x2.yaml",
                           "--output-root", str(root), *tiny], cwd=ROOT, env=ENV, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    names = ["pg-fp16", "pg-bf16", "grpo-fp16", "grpo-bf16"]
    for name in names:
        config = json.loads((root / name / "config.json").read_text())
        assert (f"{config['algo']}-{config['dtype']}", config["steps"], config["wandb_mode"]) == (name, 2, "disabled")
    # The comparison closes the output: its table (as comparison.md holds it), then the files it wrote.
    table = (root / "comparison.md").read_text()
    written = [root / name for name in ("comparison.md", "comparison.csv", "comparison_reward.png",
                                        "comparison_mismatch.png")]
    assert done.stdout.endswith(table + "".join(f"wrote {p}\n" for p in written))
    assert [line.split(" | ")[0] for line in table.splitlines()[2:]] == ["| grpo bf16", "| grpo fp16", "| pg bf16",
                                                                        "| pg fp16"]
    assert sorted(row["run"] for row in csv.DictReader((root / "comparison.csv").open())) == sorted(names)
    assert all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in written[2:])


def test_a_sweep_of_evaluations_alone_ends_without_a_comparison(embedded_policy_dir, tmp_path):
    # --steps 0: every run evaluates the loaded policy and logs that row alone; no run logged a step to compare.
    root = tmp_path / "root"
    done = subprocess.run([sys.executable, "experiments/sweep_offline.py", "experiments/sweep_cpu_2x2.yaml",
                           "--output-root", str(root), "--model", str(embedded_policy_dir), "--steps", "0",
                           "--eval-limit", "2", "--wandb-mode", "disabled"], cwd=ROOT, env=ENV, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert all((root / name / "summary.json").is_file() for name in ("pg-fp16", "pg-bf16", "grpo-fp16", "grpo-bf16"))
    assert "comparison" not in done.stdout and not (root / "comparison.md").exists()


GOOD_COMMAND = "command:\n  - ${env}\n  - ${interpreter}\n  - -m\n  - precision_oat.main\n  - ${args}\n"


@pytest.mark.parametrize("text, error", [
    (None, "does not exist; give a sweep file, e.g. experiments/sweep_cpu_2x2.yaml"),
    ("method: grid\nparameters:\n  algo:\n    values: [pg\n", ": not valid YAML at line 5 (expected ',' or ']'"),
    ("", ": holds no sweep (a mapping with method, command and parameters)"),
    ("method: bayes\n" + GOOD_COMMAND + "parameters:\n  algo:\n    values: [pg]\n",
     ": method 'bayes'; only grid sweeps can be run offline"),
    ("method: grid\nparameters:\n  algo:\n    values: [pg]\n",
     ": its command list must run -m precision_oat.main with ${args}"),
    ("method: grid\n" + GOOD_COMMAND, ": no parameters to sweep;"),
    ("method: grid\n" + GOOD_COMMAND + "parameters:\n  algo:\n    values: []\n",
     ": parameter algo needs a non-empty values list, or one value"),
])
def test_a_sweep_file_the_runner_cannot_take_is_one_line(text, error, tmp_path):
    # Before: a FileNotFoundError, yaml's ScannerError, a TypeError or a KeyError, each as a traceback.
    sweep = tmp_path / "sweep.yaml"
    if text is not None:
        sweep.write_text(text)
    done = subprocess.run([sys.executable, "experiments/sweep_offline.py", str(sweep), "--output-root",
                           str(tmp_path / "root")], cwd=ROOT, env=ENV, capture_output=True, text=True)
    assert done.returncode == 1 and done.stdout == ""
    [line] = done.stderr.splitlines()
    assert line.startswith(f"error: {sweep}") and error in line, line
    assert not (tmp_path / "root").exists()
