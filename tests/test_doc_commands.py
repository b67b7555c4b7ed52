"""Every CPU-sized command that README.md and docs/*.md show runs, and prints the figures they quote.

A command meant for a CPU sits in a ```bash block right after a tag such as
``<!-- cpu-test: --steps 1 --max-new-tokens 4 -->``; the flags of the tag are appended to each
command of the block to shrink it. Each command runs from the repository root with this Python,
a fresh output folder (``--output-dir``, or a sweep's ``--output-root``) and, for training,
``--wandb-mode disabled``. A comment line right
under a command, ``# PREFIX: name 7.5x …``, quotes what it prints: the line of its output that
starts with ``PREFIX:`` must carry the same figures.
"""

from __future__ import annotations

import math
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from precision_oat.runs.folder import RUN_MARKER

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
TAG = re.compile(r"^<!-- cpu-test:(.*?)-->$")
# The modules (``python -m``) and scripts (``python PATH``) a tagged command may run: the flag that gives it a fresh
# output folder, if it writes one, and whether it writes a wandb run.
MODULES = {"precision_oat.main": {"output_dir": "--output-dir", "wandb": True},
           "precision_oat.lab": {"output_dir": "--output-dir", "wandb": False},
           "precision_oat.lab.preflight": {"output_dir": "--output-dir", "wandb": False},
           "precision_oat.compare": {"output_dir": None, "wandb": False}}
SCRIPTS = {"experiments/sweep_offline.py": {"output_dir": "--output-root", "wandb": True}}
# At least this many tagged commands: a tag lost in an edit fails here rather than going untested.
MIN_COMMANDS = 8
# Figures are printed to one decimal; another CPU's kernels may round the last digit differently.
FIGURE_RTOL = 0.02


@dataclass
class DocCommand:
    page: str
    line: int
    argv: list[str]
    extra: list[str]
    quoted: list[str] = field(default_factory=list)

    @property
    def module(self) -> str:
        """The module a ``python -m`` command runs, or the script a ``python PATH`` command runs."""
        return self.argv[2] if self.argv[1] == "-m" else self.argv[1]

    @property
    def id(self) -> str:
        return f"{self.page}:{self.line}"


def _block_after(lines: list[str], start: int) -> tuple[int, list[str]]:
    """The ```bash block that must follow the tag on line ``start`` (its first line number and lines)."""
    i = start + 1
    while i < len(lines) and not lines[i].strip():
        i += 1
    if i == len(lines) or lines[i].strip() != "```bash":
        raise ValueError(f"line {start + 1}: a cpu-test tag must be followed by a ```bash block")
    end = next(j for j in range(i + 1, len(lines)) if lines[j].strip() == "```")
    return i + 2, lines[i + 1:end]


def _commands_of_block(page: str, first: int, block: list[str], extra: list[str]) -> list[DocCommand]:
    commands: list[DocCommand] = []
    pending = ""
    for offset, raw in enumerate(block):
        line = raw.strip()
        if not line:
            continue
        if line.startswith("#"):
            if not commands:
                raise ValueError(f"{page}:{first + offset}: a quoted output needs a command above it")
            commands[-1].quoted.append(line.lstrip("# "))
            continue
        pending += line.removesuffix("\\") + " "
        if line.endswith("\\"):
            continue
        argv = shlex.split(pending, comments=True)
        pending = ""
        if not (argv[:2] == ["python", "-m"] and argv[2] in MODULES or argv[0] == "python" and argv[1] in SCRIPTS):
            raise ValueError(f"{page}:{first + offset}: a tagged block holds only `python -m` commands of "
                             f"{sorted(MODULES)} and `python` runs of {sorted(SCRIPTS)}, not {' '.join(argv)}")
        commands.append(DocCommand(page, first + offset, argv, extra))
    return commands


def tagged_commands() -> list[DocCommand]:
    commands = []
    for path in PAGES:
        lines = path.read_text().splitlines()
        for i, line in enumerate(lines):
            tag = TAG.match(line.strip())
            if tag:
                first, block = _block_after(lines, i)
                commands += _commands_of_block(path.name, first, block, shlex.split(tag.group(1)))
    return commands


COMMANDS = tagged_commands()


def _figures(text: str) -> dict[str, tuple[float, float]]:
    """``name 7.5x`` or ``name 7–11x`` pairs of a printed or quoted line, as (low, high)."""
    return {name: (float(low), float(high or low))
            for name, low, high in re.findall(r"(\S+) ([-+0-9.e]+)(?:–([-+0-9.e]+))?x\b", text)}


def _agrees(quoted: tuple[float, float], printed: float) -> bool:
    """A quoted figure within its rounding, or a quoted range (a figure that varies with the CPU) around it."""
    low, high = quoted
    return math.isclose(low, printed, rel_tol=FIGURE_RTOL) if low == high else low <= printed <= high


def _check_quoted(quoted: str, output: str) -> None:
    prefix, _, figures = quoted.partition(": ")
    printed = next((line for line in output.splitlines() if line.startswith(prefix + ": ")), None)
    assert printed is not None, f"the output has no line starting {prefix!r}:\n{output}"
    expected, got = _figures(figures), _figures(printed)
    assert expected, f"no figures to check in the quoted line {quoted!r}"
    assert expected.keys() == got.keys(), f"quoted {quoted!r}, printed {printed!r}"
    off = {k: (expected[k], got[k][0]) for k in expected if not _agrees(expected[k], got[k][0])}
    assert not off, f"the docs quote {quoted!r}; the command prints {printed!r}"


def _check_run_folder(out: Path, output: str) -> None:
    """A training run's folder holds its step-1 checkpoint under the name docs/runs.md gives, and the outputs
    line names what is in it."""
    digits = re.search(r"`checkpoints/step_(\d+)/`", (ROOT / "docs" / "runs.md").read_text()).group(1)
    assert (out / "checkpoints" / f"step_{1:0{len(digits)}d}").is_dir(), sorted(p.name for p in out.glob("checkpoints/*"))
    line = next(line for line in output.splitlines() if line.startswith("outputs: "))
    listed = line.removeprefix(f"outputs: {out}/").split(", ")
    held = [p.name + "/" if p.is_dir() else p.name for p in out.iterdir() if p.name not in ("run.lock", RUN_MARKER)]
    assert sorted(listed) == sorted(held), line


def test_enough_commands_are_tagged_and_none_twice():
    assert len(COMMANDS) >= MIN_COMMANDS, [c.id for c in COMMANDS]
    assert len({c.id for c in COMMANDS}) == len(COMMANDS)
    pages = {c.page for c in COMMANDS}
    assert {"README.md", "metrics.md", "results.md"} <= pages, pages


def test_every_tag_is_read():
    tags = sum(1 for path in PAGES for line in path.read_text().splitlines() if "cpu-test:" in line and
               line.strip().startswith("<!--"))
    blocks = sum(1 for path in PAGES for line in path.read_text().splitlines() if TAG.match(line.strip()))
    assert tags == blocks, "a cpu-test tag is malformed: write it alone on its line as <!-- cpu-test: FLAGS -->"


def test_a_block_with_a_command_for_another_stack_is_refused():
    with pytest.raises(ValueError, match="only `python -m` commands"):
        _commands_of_block("x.md", 1, ["torchrun --nproc-per-node 2 -m precision_oat.main"], [])
    with pytest.raises(ValueError, match="followed by a ```bash block"):
        _block_after(["<!-- cpu-test: -->", "text"], 0)


def test_a_quoted_figure_that_the_command_does_not_print_fails():
    with pytest.raises(AssertionError, match="the docs quote"):
        _check_quoted("bf16/fp16: k3 71.0x  seq_kl 71.0x", "bf16/fp16: k3 80.0x  seq_kl 71.0x\n")
    _check_quoted("bf16/fp16: k3 71.0x  seq_kl 71.0x", "bf16/fp16: k3 71.0x  seq_kl 71.0x\n")


def test_a_quoted_range_holds_the_figures_inside_it_only():
    _check_quoted("bf16/fp16: k3 50–150x", "bf16/fp16: k3 141.3x\n")
    with pytest.raises(AssertionError, match="the docs quote"):
        _check_quoted("bf16/fp16: k3 50–150x", "bf16/fp16: k3 160.0x\n")


@pytest.mark.parametrize("command", COMMANDS, ids=[c.id for c in COMMANDS])
def test_the_documented_command_runs(command: DocCommand, tmp_path):
    argv = [sys.executable, *command.argv[1:], *command.extra]
    out = tmp_path / "out"
    help_only = "--help" in argv
    writes = {**MODULES, **SCRIPTS}[command.module]
    if writes["output_dir"] and not help_only:
        argv += [writes["output_dir"], str(out)]
    if writes["wandb"] and not help_only:
        argv += ["--wandb-mode", "disabled"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    output = done.stdout + done.stderr
    assert done.returncode == 0, f"{' '.join(argv)} exited {done.returncode}:\n{output[-4000:]}"
    for quoted in command.quoted:
        _check_quoted(quoted, done.stdout)
    if command.module == "precision_oat.main" and not help_only:
        _check_run_folder(out, done.stdout)
    if command.module == "experiments/sweep_offline.py" and not help_only:
        assert (out / "comparison.md").read_text() in done.stdout, "the sweep ends with its comparison"
