"""The Oat backend suite: real oat-llm 0.2.4, DeepSpeed 0.16.8 and launchpad, on CPU.

It runs in the Python 3.10 venv that ``scripts/oat_env.sh`` builds. Where ``oat`` is not
importable the folder is not collected, unless ``PRECISION_OAT_REQUIRE=oat`` (set by CI when
it runs this folder in that venv), where a missing Oat is an error.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
OAT_AVAILABLE = importlib.util.find_spec("oat") is not None

if not OAT_AVAILABLE and os.environ.get("PRECISION_OAT_REQUIRE") == "oat":
    raise pytest.UsageError("PRECISION_OAT_REQUIRE=oat but oat is not importable in " + sys.executable)

collect_ignore_glob = [] if OAT_AVAILABLE else ["test_*.py"]


def pytest_report_header(config):
    if not OAT_AVAILABLE:
        return "tests/oat: not collected (oat is not importable; run in the venv printed by scripts/oat_env.sh)"


def pytest_collection_modifyitems(config, items):
    for item in items:
        if HERE in Path(str(item.fspath)).resolve().parents:
            item.add_marker(pytest.mark.requires_oat)


@pytest.fixture(scope="session")
def oat_policy_dir(embedded_policy_dir, tmp_path_factory):
    """The warmed-up embedded policy, as the Oat backend hands it to Oat (readable by transformers 4.51)."""
    from precision_oat.backends.oat.program import portable_embedded_policy

    return portable_embedded_policy(tmp_path_factory.mktemp("oat-policy"))


@pytest.fixture
def oat_args(oat_policy_dir, tmp_path):
    """``oat_args(*flags, cuda_devices=0)``: our command line mapped onto Oat's PPOArgs."""
    from precision_oat.backends.oat.oat_args import to_oat_args
    from precision_oat.presets import parse_args

    def make(*flags: str, cuda_devices: int = 0):
        args = parse_args(["--backend", "oat", "--wandb-mode", "disabled", "--output-dir", str(tmp_path), *flags])
        return to_oat_args(args, pretrain=str(oat_policy_dir), output_dir=tmp_path, cuda_devices=cuda_devices)

    return make
