"""The Python entry points of docs/python.md: its code runs as written, and make_args is the command line's twin."""

import re
from pathlib import Path

import pytest

from precision_oat import make_args
from precision_oat.errors import UserError
from precision_oat.presets import parse_args

ROOT = Path(__file__).resolve().parents[1]
PAGE = (ROOT / "docs" / "python.md").read_text()


def test_the_pages_code_builds_runs_and_reads_a_run(embedded_policy_dir, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "args").symlink_to(ROOT / "args")  # the page's preset path is relative to the repository
    namespace = {}
    blocks = re.findall(r"```python\n(.*?)```", PAGE, re.S)
    assert len(blocks) == 3
    for block in blocks:
        exec(compile(block, "docs/python.md", "exec"), namespace)
    assert namespace["summary"]["steps"] == 2
    assert len(namespace["rows"]) == 2 and (tmp_path / "runs" / "python-example" / "summary.json").is_file()
    assert namespace["sanity"].train.steps == 10 and namespace["sanity"].algorithm.algo == "grpo"


def test_make_args_gives_what_the_same_flags_give():
    flags = ["--algo", "grpo-tis", "--dtype", "fp16", "--sampler-dtype", "bf16", "--lora-rank", "2",
             "--lora-target-modules", "q_proj", "v_proj", "--max-new-tokens", "16"]
    made = make_args(algo="grpo-tis", dtype="fp16", sampler_dtype="bf16", lora_rank=2,
                     lora_target_modules=["q_proj", "v_proj"], max_new_tokens=16)
    assert made == parse_args(flags)
    assert made.lora.lora_target_modules == ("q_proj", "v_proj") and made.precision.sampler_dtype == "bf16"


def test_make_args_applies_keywords_over_the_preset():
    preset = ROOT / "args" / "sanity" / "bf16_grpo.yaml"
    made = make_args(preset=preset, steps=3, dtype="fp16")
    assert made == parse_args(["--preset", str(preset), "--steps", "3", "--dtype", "fp16"])
    assert made.train.steps == 3 and made.precision.dtype == "fp16" and made.preset == preset


def test_make_args_refuses_a_keyword_the_run_would_not_read_as_the_command_line_does():
    with pytest.raises(UserError, match=r"^make_args: --eval-samples 4: read only when the run evaluates"):
        make_args(eval_samples=4)
    assert make_args(eval_every=10, eval_samples=4).eval.eval_samples == 4


def test_make_args_names_a_misspelt_keyword_and_a_bad_value():
    with pytest.raises(UserError, match=r"^make_args: unknown key 'stpes'; did you mean 'steps'\?$"):
        make_args(stpes=3)
    with pytest.raises(UserError, match=r"^make_args: --steps -1: must be an integer ≥ 0"):
        make_args(steps=-1)
