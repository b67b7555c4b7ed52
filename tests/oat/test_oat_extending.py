"""docs/extending.md runs as written: the new piece registers, composes onto both learners,
and computes the weight its formula states."""

import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from precision_oat.algorithms import PolicyBatch, build_policy_loss, compose, resolve
from precision_oat.backends.oat.oat_learner import OatLearner
from precision_oat.learners.builtin import PrecisionLearner as LocalLearner

PAGE = (Path(__file__).resolve().parents[2] / "docs" / "extending.md").read_text()
PIECES, ENTRY, SUBCLASSES = re.findall(r"```python\n(.*?)```", PAGE, re.S)[:3]


@pytest.fixture(scope="module")
def pieces_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("user-code")
    (folder / "my_pieces.py").write_text(PIECES)
    (folder / "train.py").write_text(ENTRY)
    sys.path.insert(0, str(folder))
    __import__("my_pieces")  # registers "seq-geo-tis"

    yield folder
    sys.path.remove(str(folder))


def spec():
    return resolve("grpo", correction="seq-geo-tis", correction_cap=1.2, max_gen_length=8)


def test_hand_written_learners_equal_the_composed_ones(pieces_dir):
    namespace: dict = {}
    exec(SUBCLASSES, namespace)
    assert namespace["GeoTISLocal"].__mro__[1:] == compose(spec(), LocalLearner).__mro__[1:]
    assert namespace["GeoTISOat"].__mro__[1:] == compose(spec(), OatLearner).__mro__[1:]


def test_the_weight_is_the_truncated_geometric_mean_ratio(pieces_dir):
    # log π_old − log μ per token; row 0 has 2 response tokens, row 1 has 3.
    diff = torch.tensor([[0.2, 0.4, 9.0], [-0.3, 0.0, 0.6]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]])
    sampler = torch.full((2, 3), -1.0)
    batch = PolicyBatch(logprobs=sampler + diff, old_logprobs=sampler + diff, sampler_logprobs=sampler,
                        advantages=torch.tensor([1.0, -1.0]), mask=mask)
    weight, stats = build_policy_loss(spec()).correction(batch)
    # ρ = (0.6, 0.3); per token (0.3, 0.1); exp → (1.34986, 1.10517); capped at 1.2 → (1.2, 1.10517).
    assert weight.squeeze(1).tolist() == pytest.approx([1.2, math.exp(0.1)], abs=1e-6)
    assert stats["mismatch/geo_is_weight_mean"] == pytest.approx((1.2 + math.exp(0.1)) / 2, abs=1e-6)


def test_the_entry_point_offers_the_new_name(pieces_dir):
    # Wide columns: the help text must not wrap the name.
    out = subprocess.run([sys.executable, "train.py", "--help"], cwd=pieces_dir, capture_output=True, text=True,
                         timeout=120, env={**os.environ, "COLUMNS": "400"})
    assert out.returncode == 0, out.stderr[-2000:]
    assert "seq-geo-tis" in out.stdout
