"""The Oat backend's console plumbing without Oat: what processes write goes to the log, the console keeps ours.

(tests/oat/test_oat_console.py checks the same through a real Oat run.)
"""

import os
import subprocess
import sys

import pytest

from precision_oat.backends.oat.console import Relay, oat_output_to
from precision_oat.errors import UserError

CHILD = "import sys; print('child out'); print('child err', file=sys.stderr)"


def library_writes(text: str) -> None:
    """What a library in this process writes to its stdout (pytest's capture replaces ``sys.stdout``, not fd 1)."""
    os.write(1, text.encode())


def test_a_child_process_writes_to_the_log_and_the_console_keeps_the_launchers_lines(tmp_path, capfd):
    log = tmp_path / "oat.log"
    with oat_output_to(log) as console:
        library_writes("launcher's own library\n")
        subprocess.run([sys.executable, "-c", CHILD], check=True)
        print("step    1/1", file=console.out)
        print("warning: x", file=console.err)
    print("after")
    printed = capfd.readouterr()
    assert printed.out == "step    1/1\nafter\n" and printed.err == "warning: x\n"
    assert sorted(log.read_text().splitlines()) == ["child err", "child out", "launcher's own library"]


def test_a_failure_shows_the_end_of_the_log_and_its_path(tmp_path, capfd):
    log = tmp_path / "oat.log"
    with pytest.raises(RuntimeError, match="boom"), oat_output_to(log):
        for i in range(25):
            library_writes(f"\x1b[1;32m[learner_0_0/0] \x1b[0;0mline {i}\n")
        raise RuntimeError("boom")
    err = capfd.readouterr().err.splitlines()
    # The last 20 of the 25 lines, without launchpad's colours.
    assert err == [f"the Oat program failed; the last lines of {log}:"] + [f"[learner_0_0/0] line {i}" for i in range(5, 25)]


def test_bad_input_stays_one_line_without_the_log(tmp_path, capfd):
    with pytest.raises(UserError), oat_output_to(tmp_path / "oat.log"):
        library_writes("noise\n")
        raise UserError("--flag: bad")
    assert capfd.readouterr().err == ""


def test_the_relay_copies_whole_lines_only_and_removes_its_file(tmp_path, capfd):
    path = tmp_path / "learner_console.txt"
    # Its thread would look only after a minute: the test looks itself, and the exit looks last.
    with open(path, "w", buffering=1) as writer, Relay(path, sys.stdout, interval=60) as relay:
        writer.write("step 1\nstep 2 half")
        writer.flush()
        relay.copy_new_lines()
        assert capfd.readouterr().out == "step 1\n"
        writer.write(" done\n")
    assert capfd.readouterr().out == "step 2 half done\n"
    assert not path.exists()
