"""Every preset under args/ (all subfolders) loads, explains itself, round-trips and yields to flags."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest

from precision_oat.args import Args, algorithm_spec
from precision_oat.presets import apply_values, load_preset, parse_args, to_values

ROOT = Path(__file__).resolve().parents[1]
PRESETS = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "args").rglob("*.yaml"))
FAMILIES = {"sanity", "lora", "octothinker"}


def _header(path: str) -> str:
    lines = (ROOT / path).read_text().splitlines()
    return "\n".join(line for line in lines[: next(i for i, l in enumerate(lines) if not l.startswith("#"))])


def test_presets_cover_every_family_in_subfolders():
    # rglob must see the nested folders; 14 sanity + 4 lora + 2 octothinker presets ship.
    assert {Path(p).parts[1] for p in PRESETS} >= FAMILIES
    assert len(PRESETS) >= 20


@pytest.mark.parametrize("path", PRESETS)
def test_preset_loads_into_args(path):
    args = load_preset(ROOT / path)
    assert isinstance(args, Args)
    assert args != Args(), "a preset that sets nothing"


@pytest.mark.parametrize("path", PRESETS)
def test_preset_header_names_its_launch_command_hardware_and_model(path):
    header = _header(path)
    assert header, f"{path} must open with comment lines"
    assert re.search(rf"python -m precision_oat\.main --preset {re.escape(path)}(\s|$)", header), header
    assert "Reproduces:" in header and "Hardware:" in header
    model = load_preset(ROOT / path).model.model
    if model is not None:
        assert model in header, f"{path}: the header must name the model it downloads ({model})"


@pytest.mark.parametrize("path", PRESETS)
def test_preset_file_name_states_its_dtype(path):
    assert Path(path).name.split("_")[0] == load_preset(ROOT / path).precision.dtype


@pytest.mark.parametrize("path", PRESETS)
def test_preset_round_trips_through_flat_values(path):
    args = load_preset(ROOT / path)
    assert apply_values(Args(), to_values(args)) == args


@pytest.mark.parametrize("path", PRESETS)
@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_command_line_flag_overrides_preset(path, dtype):
    preset = load_preset(ROOT / path)
    parsed = parse_args(["--preset", str(ROOT / path), "--dtype", dtype])
    # The flag wins; every other field keeps the preset's value.
    expected = dataclasses.replace(
        preset,
        preset=ROOT / path,
        precision=dataclasses.replace(preset.precision, dtype=dtype),
    )
    assert parsed == expected


@pytest.mark.parametrize("path", PRESETS)
def test_preset_algorithm_resolves_and_precision_validates(path):
    args = load_preset(ROOT / path)
    spec = algorithm_spec(args)
    assert spec.loss_constant == float(args.rollout.max_new_tokens)
    precision = args.precision.build()
    assert precision.trainer == args.precision.dtype
    assert precision.loss_scaling.enabled == (args.precision.dtype == "fp16")


def test_presets_map_the_reference_flags_onto_honest_algorithms():
    # The reference's *_seq_mis.sh scripts truncate (--use_seq_is --seq_is_clip_max 3: IS-PG, C = 3);
    # its *_grpo_seq_mis.sh scripts mask (--ppo_use_seq_is --seq_is_clip_max 10).
    truncating = algorithm_spec(load_preset(ROOT / "args/sanity/bf16_pg_seq_tis_c3.yaml"))
    assert (truncating.objective, truncating.correction, truncating.is_cap) == ("pg", "none", 3.0)
    masking = algorithm_spec(load_preset(ROOT / "args/sanity/bf16_grpo_mis.yaml"))
    assert (masking.objective, masking.correction, masking.correction_cap) == ("clip", "seq-mis", 10.0)


def test_docs_list_every_preset():
    docs = (ROOT / "docs" / "presets.md").read_text()
    missing = [p for p in PRESETS if f"`{p}`" not in docs]
    assert not missing, f"docs/presets.md does not list {missing}"


def test_unknown_key_in_preset_is_named(tmp_path):
    path = tmp_path / "typo.yaml"
    path.write_text("dtype: bf16\nlearning_rat: 1.0e-6\n")
    with pytest.raises(ValueError, match="unknown key 'learning_rat'"):
        load_preset(path)
    with pytest.raises(SystemExit) as exit_info:
        parse_args(["--preset", str(path)])
    assert "learning_rat" in str(exit_info.value.code)


def test_an_unknown_key_with_no_close_match_points_to_the_flag_list_in_one_short_line(tmp_path):
    # Before: the line listed every known key, some 150 of them.
    path = tmp_path / "unknown.yaml"
    path.write_text("zzzz: 1\n")
    with pytest.raises(SystemExit) as exit_info:
        parse_args(["--preset", str(path)])
    assert exit_info.value.code == (f"error: --preset {path}: unknown key 'zzzz'; the keys are the flags "
                                    "`python -m precision_oat.main --help` lists, with dashes or underscores")


@pytest.mark.parametrize("text, message", [
    ("seed: 1\nmax_new_tokens: 8\nmax_new_tokens: 9\n", "not valid YAML at line 3 ('max_new_tokens' is given twice"),
    ("max_new_tokens: 8\nmax-new-tokens: 12\n", "'max-new-tokens' names --max-new-tokens a second time"),
])
def test_a_flag_given_twice_in_one_preset_is_refused(tmp_path, text, message):
    # Either spelling twice would keep one of the two values without a word.
    path = tmp_path / "twice.yaml"
    path.write_text(text)
    with pytest.raises(SystemExit) as exit_info:
        parse_args(["--preset", str(path)])
    assert str(exit_info.value.code).startswith(f"error: --preset {path}: ") and message in str(exit_info.value.code)


def test_a_preset_value_reads_as_the_same_word_on_the_command_line(tmp_path):
    # Before: YAML 1.1 read `no` as false, so the template "no" failed with "--prompt-template False: must be a string".
    path = tmp_path / "words.yaml"
    path.write_text("prompt_template: no\nrun_name: yes\nvllm_enforce_eager: true\nlearning_rate: 1e-6\n")
    args = parse_args(["--preset", str(path)])
    assert (args.task.prompt_template, args.log.run_name) == ("no", "yes")
    assert args.rollout.vllm_enforce_eager is True and args.train.learning_rate == 1e-6
    path.write_text("vllm_enforce_eager: yes\n")
    with pytest.raises(SystemExit) as exit_info:
        parse_args(["--preset", str(path)])
    assert str(exit_info.value.code) == f"error: --preset {path}: --vllm-enforce-eager yes: must be true or false"


def test_missing_preset_file_exits_with_its_path(tmp_path):
    path = tmp_path / "nowhere.yaml"
    with pytest.raises(SystemExit) as exit_info:
        parse_args(["--preset", str(path)])
    message = str(exit_info.value.code)
    assert str(path) in message and "no such file" in message


def test_a_runs_config_json_is_a_preset_for_the_same_flags(tmp_path, embedded_policy_dir):
    from precision_oat.backends.local.driver import train
    from tests.backends.helpers import make_args

    args = make_args(model=str(embedded_policy_dir), algo="grpo-tis", dtype="bf16", steps=1, output_dir=str(tmp_path))
    train(args)
    config = json.loads((tmp_path / "config.json").read_text())
    assert {"precision_contract"} <= set(config)
    assert to_values(load_preset(tmp_path / "config.json")) == to_values(args)
