"""grade() from callers that multiprocessing's spawn and forkserver cannot serve: a script
without a main guard, a script read on stdin. Each runs in a fresh interpreter with real workers."""

import subprocess
import sys
import textwrap

import pytest

# No `if __name__ == "__main__":` guard, on purpose. The power tower keeps sympy busy for minutes,
# so it must come back as a timeout; the last two need math-verify in a worker.
SCRIPT = textwrap.dedent(
    r"""
    import time
    from precision_oat.tasks.math import grade

    print("start")
    print(grade(r"\boxed{12345678901234567891}", "12345678901234567890"))
    began = time.monotonic()
    print(grade(r"\boxed{9^{9^{9^{9^{9}}}}}", "1", timeout_s=2.0), time.monotonic() - began < 10)
    print(grade(r"\boxed{2\sqrt{2}}", r"\sqrt{8}"))
    print(grade(r"\boxed{2\sqrt{3}}", r"\sqrt{8}"))
    """
)
EXPECTED = "start\nFalse\nFalse True\nTrue\nFalse\n"


@pytest.fixture
def shadowing_dir(tmp_path):
    """A working directory whose modules would shadow math-verify's stack if a worker imported them."""
    for name in ("sympy", "math_verify"):
        (tmp_path / f"{name}.py").write_text('raise ImportError("a module of the caller\'s directory")\n')
    return tmp_path


def test_a_script_without_main_guard_runs_once_and_grades(tmp_path):
    script = tmp_path / "grade_unguarded.py"
    script.write_text(SCRIPT)
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout == EXPECTED  # "start" once: the workers never ran the script


def test_a_script_on_stdin_grades_from_any_directory(shadowing_dir):
    result = subprocess.run(
        [sys.executable, "-"], input=SCRIPT, capture_output=True, text=True, cwd=shadowing_dir, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == EXPECTED
