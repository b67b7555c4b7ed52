"""``run_cli(*flags)``: ``python -m precision_oat.main --backend oat FLAGS`` as a user runs it, its console captured."""

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def run_cli(*flags: str, timeout: int = 300) -> subprocess.CompletedProcess:
    """The finished command, stdout and stderr together in ``stdout``."""
    # A session of its own, so that a hung program (launchpad nodes included) can be ended whole. Its
    # processes share the pipe, so one's write can split another's multi-byte character: replace those bytes.
    process = subprocess.Popen(
        [sys.executable, "-m", "precision_oat.main", "--backend", "oat", *flags],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, encoding="utf-8", errors="replace",
        start_new_session=True,
    )
    try:
        out, _ = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        out, _ = process.communicate()
        pytest.fail(f"the Oat program did not finish in {timeout}s:\n{out[-4000:]}")
    return subprocess.CompletedProcess(process.args, process.returncode, out, None)
