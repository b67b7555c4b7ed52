"""The Makefile's set-up: where torch comes from (``make -n`` prints the commands without running them)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CPU_INDEX = "https://download.pytorch.org/whl/cpu"

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="needs make")


def torch_install_line(tmp_path, *variables: str) -> str:
    commands = subprocess.run(["make", "-n", "-B", "setup", f"VENV={tmp_path / 'venv'}", *variables], cwd=ROOT,
                              capture_output=True, text=True, check=True).stdout
    [line] = [line for line in commands.splitlines() if "install -q torch==" in line]
    return line


def test_setup_installs_torch_from_the_index_named_by_torch_index(tmp_path):
    assert torch_install_line(tmp_path, f"TORCH_INDEX={CPU_INDEX}").endswith(
        f"pip install -q torch==2.13.0 --index-url {CPU_INDEX}")


def test_setup_adds_no_index_by_default(tmp_path):
    line = torch_install_line(tmp_path)
    assert line.endswith("pip install -q torch==2.13.0") and "index-url" not in line
