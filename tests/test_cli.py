"""``python -m precision_oat.main`` as a process: help on a core-only install, and one-line errors.

Each case is its own interpreter; they all start at once (torch's import dominates their time).
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from precision_oat.algorithms import RECIPES

from .test_args import parse_help

BACKENDS = ("vllm", "deepspeed", "oat", "launchpad")

# Makes the backends uninstalled for this interpreter, whatever the venv holds: every
# import finder answers "not found" for them, as on a core-only install.
HIDE_BACKENDS = f"""
import sys
class _Hidden:
    def __init__(self, finder):
        self.finder = finder
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in {BACKENDS!r}:
            return None
        return self.finder.find_spec(name, path, target)
    def __getattr__(self, attr):
        return getattr(self.finder, attr)
sys.meta_path[:] = [_Hidden(f) for f in sys.meta_path]
"""

MAIN = "import runpy, sys; sys.argv = ['precision_oat.main', *{argv!r}]; runpy.run_module('precision_oat.main', run_name='__main__')"

CHECK_IMPORTS = f"""
import sys
import precision_oat.main, precision_oat.backends.local.driver
print(sorted(m for m in {BACKENDS!r} if m in sys.modules))
"""

CASES = {
    "help": HIDE_BACKENDS + MAIN.format(argv=["--help"]),
    "imports": CHECK_IMPORTS,
    "bad_algo": MAIN.format(argv=["--algo", "foo"]),
    "bad_dtype": MAIN.format(argv=["--dtype", "fp8"]),
    "unscaled_fp16": MAIN.format(argv=["--dtype", "fp16", "--loss-scaling", "none"]),
    "missing_preset": MAIN.format(argv=["--preset", "no/such/preset.yaml"]),
    "missing_vllm": HIDE_BACKENDS + MAIN.format(argv=["--sampler", "vllm", "--output-dir", "run"]),
    "missing_deepspeed": HIDE_BACKENDS + MAIN.format(argv=["--learner", "deepspeed", "--output-dir", "run"]),
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """name → (returncode, stdout, stderr, working folder) of every case, run concurrently."""
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    started = {}
    for name, code in CASES.items():
        cwd = tmp_path_factory.mktemp(name)
        started[name] = (subprocess.Popen([sys.executable, "-c", code], cwd=cwd, env=env, text=True,
                                          stdout=subprocess.PIPE, stderr=subprocess.PIPE), cwd)
    results = {}
    for name, (proc, cwd) in started.items():
        out, err = proc.communicate(timeout=120)
        results[name] = (proc.returncode, out, err, cwd)
    return results


def _flat(text: str) -> str:
    """Text with the box drawing and line wrapping of tyro's error panels removed."""
    return " ".join(text.replace("│", " ").split())


def test_help_works_without_vllm_deepspeed_oat_or_launchpad(runs):
    code, out, err, _ = runs["help"]
    assert code == 0, err
    flags = {f.names[0] for f in parse_help(out)}
    assert {"--algo", "--dtype", "--sampler-dtype", "--trainer-dtype", "--loss-scaling", "--backend"} <= flags


def test_importing_main_and_the_local_loop_loads_no_backend(runs):
    code, out, err, _ = runs["imports"]
    assert code == 0, err
    assert out.strip() == "[]"


def test_unknown_algo_lists_the_recipes_and_fails(runs):
    code, out, err, _ = runs["bad_algo"]
    assert code != 0
    text = _flat(out + err)
    assert "'foo'" in text and "--algo" in text
    for name in RECIPES:
        assert f"'{name}'" in text, f"{name} missing from: {text}"


def test_unknown_dtype_lists_the_dtypes_and_fails(runs):
    code, out, err, _ = runs["bad_dtype"]
    assert code != 0
    text = _flat(out + err)
    assert "'fp8'" in text and "--dtype" in text
    assert all(f"'{d}'" in text for d in ("fp16", "bf16", "fp32"))


def test_fp16_without_loss_scaling_fails_in_one_line_before_anything_loads(runs):
    code, out, err, cwd = runs["unscaled_fp16"]
    assert code != 0
    lines = [line for line in (out + err).splitlines() if line.strip()]
    assert len(lines) == 1, lines
    assert lines[0].startswith("error: ") and "--loss-scaling" in lines[0]
    assert "Traceback" not in out + err
    # The run folder is made before the model loads; nothing may exist yet.
    assert not (cwd / "runs").exists()


def test_missing_preset_fails_with_a_clear_message(runs):
    code, out, err, _ = runs["missing_preset"]
    assert code != 0
    assert "Traceback" not in out + err
    assert "error: --preset no/such/preset.yaml: no such file" in err


@pytest.mark.parametrize("case, flag, install", [("missing_vllm", "--sampler vllm", 'pip install -e ".[vllm]"'),
                                                  ("missing_deepspeed", "--learner deepspeed", 'pip install -e ".[deepspeed]"')])
def test_a_missing_stack_stops_the_run_in_one_line_before_the_folder_is_made(runs, case, flag, install):
    code, out, err, cwd = runs[case]
    assert code != 0
    assert "Traceback" not in out + err
    errors = [line for line in err.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and errors[0].startswith(f"error: {flag} needs ") and install in errors[0], err
    assert not (cwd / "run").exists()
