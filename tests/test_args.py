"""The command line as a user sees it: every flag documented once, the flag names the docs use,
presets under flags, and every recipe resolving."""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import io
import re

import pytest
import tyro

import precision_oat.args as args_module
from precision_oat.algorithms import RECIPES
from precision_oat.args import Args, algorithm_spec
from precision_oat.presets import parse_args

ARGS_CLASSES = [
    cls for _, cls in inspect.getmembers(args_module, inspect.isclass)
    if dataclasses.is_dataclass(cls) and cls.__module__ == args_module.__name__
]


def _render_help(call) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as e:
        call()
    assert e.value.code in (0, None)
    return out.getvalue()


@dataclasses.dataclass
class Flag:
    names: list[str]
    signature: str
    help: str

    @property
    def choices(self) -> list[str]:
        braces = re.search(r"\{([^}]*)\}", re.sub(r"\s+", "", self.signature))
        return braces.group(1).split(",") if braces else []


def parse_help(text: str) -> list[Flag]:
    """The flags of a tyro ``--help`` page: names, signature (with choices) and help, default removed.

    Works on both of tyro's layouts (rich boxes on a UTF-8 stream, plain text otherwise): an
    entry is a signature line starting with ``-`` (which may wrap onto lines of the same
    indent) followed by help lines indented deeper, or starting on the signature's line.
    """
    flags: list[Flag] = []
    current, indent, in_help = None, 0, False
    for raw in text.splitlines():
        line = raw.rstrip()
        if line.startswith("│"):
            line = line[1:].removesuffix("│").rstrip()
        elif line.startswith(("╭", "╰")):
            current = None
            continue
        body = line.strip()
        if not body or set(body) <= {"-", "─"}:
            continue
        depth = len(line) - len(line.lstrip())
        if current is not None and depth > indent:
            current.help = f"{current.help} {body}".strip()
            in_help = True
        elif body.startswith("-"):
            # A short signature shares its line with the help, two or more spaces apart.
            signature, _, help_text = body.partition("  ")
            current, indent, in_help = Flag([], signature, help_text.strip()), depth, bool(help_text.strip())
            flags.append(current)
        elif current is None or depth < indent or in_help:
            current = None  # usage, descriptions and section titles
        else:
            current.signature += " " + body
    for flag in flags:
        flag.names = [token.split()[0] for token in flag.signature.split(", ") if token.startswith("-")]
        flag.help = re.sub(r"\s*\(default: .*\)$", "", flag.help).strip()
    return [f for f in flags if "--help" not in f.names]


def _check_help(flags: list[Flag], page: str) -> None:
    assert flags, f"no flags found on the {page} help page"
    empty = [f.names[0] for f in flags if not f.help]
    assert not empty, f"{page}: flags without help: {empty}"
    seen: dict[str, str] = {}
    for f in flags:
        other = seen.setdefault(f.help.lower(), f.names[0])
        assert other == f.names[0], f"{page}: {other} and {f.names[0]} share the help {f.help!r}"


@dataclasses.dataclass
class _Faulty:
    """A class with both faults the help check exists to catch."""

    a: int = 0
    # Same words.
    b: int = 0
    # Same words.
    c: int = 0


def test_help_check_catches_missing_and_repeated_help():
    flags = {f.names[0]: f for f in parse_help(_render_help(lambda: tyro.cli(_Faulty, args=["--help"])))}
    assert (flags["--a"].help, flags["--b"].help, flags["--c"].help) == ("", "Same words.", "Same words.")
    with pytest.raises(AssertionError, match="without help"):
        _check_help([flags["--a"], flags["--b"]], "_Faulty")
    with pytest.raises(AssertionError, match="share the help"):
        _check_help([flags["--b"], flags["--c"]], "_Faulty")


def cli_flags() -> dict[str, Flag]:
    text = _render_help(lambda: parse_args(["--help"]))
    return {f.names[0]: f for f in parse_help(text)}


def test_every_cli_flag_has_its_own_help():
    flags = cli_flags()
    _check_help(list(flags.values()), "python -m precision_oat.main")
    # Every field of every group is a flag: nothing is hidden or lost when prefixes are omitted.
    fields = [g.name for f in dataclasses.fields(Args) for g in (
        dataclasses.fields(f.default_factory()) if f.default_factory is not dataclasses.MISSING else [f])]
    assert sorted(flags) == sorted("--" + name.replace("_", "-") for name in fields)


def _field_comment(cls, name: str) -> str:
    """The comment line above ``name`` in the source of ``cls``."""
    lines = inspect.getsource(cls).splitlines()
    index = next(i for i, line in enumerate(lines) if line.strip().startswith(f"{name}:"))
    return lines[index - 1].strip().removeprefix("# ")


def test_help_parser_sees_wrapped_choices_and_defaults():
    # Guards the parser above: --algo's choices wrap onto a second line at 80 columns.
    flags = cli_flags()
    assert flags["--gradient-checkpointing"].names == ["--gradient-checkpointing", "--no-gradient-checkpointing"]
    from precision_oat.args import TrainArgs

    assert flags["--steps"].help == _field_comment(TrainArgs, "steps")


@pytest.mark.parametrize("cls", ARGS_CLASSES, ids=lambda c: c.__name__)
def test_every_args_class_renders_help_alone_without_empty_or_repeated_help(cls):
    text = _render_help(lambda: tyro.cli(cls, args=["--help"]))
    assert (cls.__doc__ or "").split("\n")[0].strip() in text
    _check_help(parse_help(text), cls.__name__)


def test_args_module_defines_every_group():
    names = {c.__name__ for c in ARGS_CLASSES}
    assert {"Args", "ModelArgs", "PrecisionArgs", "AlgorithmArgs", "RolloutArgs", "TrainArgs"} <= names


def test_algo_flag_lists_every_recipe():
    assert cli_flags()["--algo"].choices == list(RECIPES)


def test_dtype_flags_list_fp16_bf16_fp32_and_the_sampler_fp8_too():
    flags = cli_flags()
    assert flags["--dtype"].choices == ["fp16", "bf16", "fp32"]
    assert flags["--master-dtype"].choices == ["fp16", "bf16", "fp32"]
    assert flags["--sampler-dtype"].choices == ["None", "fp8", "fp16", "bf16", "fp32"]
    assert flags["--trainer-dtype"].choices == ["None", "fp16", "bf16", "fp32"]


def test_algo_and_dtype_parse_under_their_short_names():
    args = parse_args(["--algo", "grpo-mis", "--dtype", "bf16", "--sampler-dtype", "fp16", "--max-new-tokens", "5"])
    assert args.algorithm.algo == "grpo-mis"
    assert (args.precision.dtype, args.precision.sampler_dtype) == ("bf16", "fp16")
    assert args.rollout.max_new_tokens == 5


def test_no_flags_gives_the_defaults():
    assert parse_args([]) == Args()


# --- presets under flags ---


def _write_preset(tmp_path, text: str):
    path = tmp_path / "preset.yaml"
    path.write_text(text)
    return path


@pytest.mark.parametrize("flags_first", [False, True])
def test_flags_override_a_preset_and_the_rest_of_the_preset_stays(tmp_path, flags_first):
    preset = _write_preset(tmp_path, "# a test preset\nalgo: grpo-tis\ndtype: bf16\nnum-samples: 4\n"
                                     "learning_rate: 1.0e-5\ncorrection_cap: 3.0\n")
    flags = ["--algo", "grpo-mis", "--num-samples", "2"]
    argv = flags + ["--preset", str(preset)] if flags_first else ["--preset", str(preset)] + flags
    args = parse_args(argv)
    assert args.algorithm.algo == "grpo-mis" and args.rollout.num_samples == 2  # flags
    assert args.precision.dtype == "bf16" and args.train.learning_rate == 1e-5  # preset
    assert args.preset == preset
    spec = algorithm_spec(args)
    assert (spec.correction, spec.correction_cap) == ("seq-mis", 3.0)


def test_of_two_presets_the_last_is_loaded_and_recorded(tmp_path):
    first, last = tmp_path / "first.yaml", tmp_path / "last.yaml"
    first.write_text("algo: grpo\n")
    last.write_text("algo: gspo\n")
    args = parse_args(["--preset", str(first), f"--preset={last}"])
    assert (args.preset, args.algorithm.algo) == (last, "gspo")


def test_preset_accepts_scientific_notation_without_a_dot(tmp_path):
    # YAML 1.1 reads `1e-5` as a string; a preset line must mean what the same flag means.
    args = parse_args(["--preset", str(_write_preset(tmp_path, "algo: grpo\nlearning_rate: 1e-5\nclip_high: 4e-4\n"))])
    assert args.train.learning_rate == 1e-5 and isinstance(args.train.learning_rate, float)
    assert args.algorithm.clip_high == 4e-4


def test_preset_with_an_unknown_key_exits_naming_it(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        parse_args(["--preset", str(_write_preset(tmp_path, "dtpye: fp16\n"))])
    assert "dtpye" in str(e.value.code)


# --- recipes ---


@pytest.mark.parametrize("algo", list(RECIPES))
def test_algorithm_spec_resolves_every_recipe(algo):
    args = parse_args(["--algo", algo, "--max-new-tokens", "12"])
    spec = algorithm_spec(args)
    recipe = RECIPES[algo]
    assert (spec.advantage, spec.objective, spec.correction, spec.reduction) == (
        recipe.advantage, recipe.objective, recipe.correction, recipe.reduction)
    assert (spec.is_cap, spec.clip_low, spec.clip_high, spec.correction_cap) == (
        recipe.is_cap, recipe.clip_low, recipe.clip_high, recipe.correction_cap)
    assert spec.loss_constant == 12.0
    assert recipe.summary, f"recipe {algo} needs a one-line summary"


def test_piece_flags_override_the_recipe():
    args = parse_args(["--algo", "grpo", "--objective", "clip", "--correction", "token-mis", "--correction-cap", "2",
                       "--advantage", "grpo", "--reduction", "seq-mean", "--clip-high", "0.28", "--adv-eps", "0.01"])
    spec = algorithm_spec(args)
    assert (spec.advantage, spec.objective, spec.correction, spec.reduction) == ("grpo", "clip", "token-mis", "seq-mean")
    assert (spec.clip_low, spec.clip_high, spec.correction_cap, spec.adv_eps) == (0.2, 0.28, 2.0, 0.01)


def test_piece_aliases_are_accepted_on_the_command_line():
    # The registry accepts `ppo` for the clip objective; the flag must too.
    assert algorithm_spec(parse_args(["--algo", "pg", "--objective", "ppo"])).objective == "clip"


def test_a_correction_without_a_cap_is_refused_naming_the_flag():
    # Refused while parsing, before anything loads, as one `error:` line.
    with pytest.raises(SystemExit) as e:
        parse_args(["--algo", "pg", "--correction", "seq-tis"])
    assert str(e.value.code).startswith("error: --correction seq-tis needs a cap")
    assert "--correction-cap" in str(e.value.code)


def test_an_attention_kernel_oat_cannot_load_is_refused_with_backend_oat():
    # Oat loads eager or flash-attention 2; anything else would be dropped without a word.
    with pytest.raises(SystemExit) as e:
        parse_args(["--backend", "oat", "--dtype", "bf16", "--attn-implementation", "flex_attention"])
    assert str(e.value.code).startswith("error: --attn-implementation flex_attention: with --backend oat")
    for kernel in ("sdpa", "eager", "flash_attention_2"):
        parse_args(["--backend", "oat", "--dtype", "bf16", "--attn-implementation", kernel])


def test_bypass_mode_refuses_self_consistent_old_logprobs_which_it_would_ignore():
    with pytest.raises(SystemExit) as e:
        parse_args(["--algo", "grpo", "--bypass-mode", "--self-consistent-old-logprobs"])
    assert str(e.value.code).startswith("error: --self-consistent-old-logprobs with --bypass-mode")


@pytest.mark.parametrize("flag, value", [("--eval-data", "data/evaluation_suite"), ("--eval-benchmarks", "aime"),
                                         ("--prompt-data", "data/train/math_1k5")])
def test_counting_refuses_the_math_data_flags(flag, value, byte_model_dir):
    # The counting task builds its own prompts and held-out counts: a math benchmark would be ignored.
    with pytest.raises(SystemExit, match=f"^error: {flag} applies to --task math; the counting task makes its own"):
        parse_args(["--task", "counting", "--model", str(byte_model_dir), flag, value])


def test_arithmetic_refuses_a_truncated_reward_it_would_not_give():
    # Its reward reads the leading number, so a cut response is graded like any other; 0 (the default) and None agree.
    with pytest.raises(SystemExit, match="^error: --truncated-reward -1.0: the arithmetic task grades the leading number"):
        parse_args(["--truncated-reward", "-1"])
    for value in ("0", "None"):
        assert parse_args(["--truncated-reward", value]).task.truncated_reward in (0.0, None)
