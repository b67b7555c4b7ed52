"""scripts/test.sh, the command CI runs: a suite name it does not know fails before any suite runs."""

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_a_misspelt_suite_fails_in_one_line_before_any_suite_runs():
    run = subprocess.run(["bash", "scripts/test.sh", "core", "cor"], cwd=ROOT, capture_output=True, text=True,
                         timeout=60)
    assert run.returncode == 2
    assert run.stderr.strip() == "unknown suite cor: the suites are core, vllm and oat"
    assert "=== core suite ===" not in run.stdout
