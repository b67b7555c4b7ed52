"""The wandb sweeps in experiments/ expand into command lines our parser accepts.

``wandb agent`` builds each run's argv from the sweep's ``command`` list: ``${env}`` becomes
``/usr/bin/env``, ``${interpreter}`` ``python`` and ``${args}`` one ``--name=value`` token
per parameter (wandb's ``create_sweep_command_args``). The rendering is restated here so
that the test checks our files against wandb's rules, not against our own helper.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
import yaml

from precision_oat.algorithms import RECIPES
from precision_oat.args import AlgorithmArgs, algorithm_spec
from precision_oat.presets import load_preset, parse_args
from tests.conftest import load_script

ROOT = Path(__file__).resolve().parents[1]
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
    assert {"experiments/sweep_sanity_dtype_x_algo.yaml", "experiments/sweep_embedded_dtype_x_algo.yaml"} <= set(SWEEPS)


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
