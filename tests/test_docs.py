"""docs/concepts.md, docs/metrics.md and docs/runs.md stay true to the code they describe."""

from __future__ import annotations

import dataclasses
import itertools
import re
from pathlib import Path

import pytest
import torch

from precision_oat.algorithms import RECIPES, PolicyBatch, build_policy_loss, compose, resolve
from precision_oat.algorithms.registry import TABLES, valid_names
from precision_oat.args import LogArgs, PrecisionArgs
from precision_oat.checks import flag
from precision_oat.runs.resume import SAFE_ON_RESUME
from precision_oat.precision.mismatch_metrics import mismatch_histograms, mismatch_metrics

ROOT = Path(__file__).resolve().parents[1]
CONCEPTS = (ROOT / "docs" / "concepts.md").read_text()
METRICS = (ROOT / "docs" / "metrics.md").read_text()
RUNS = (ROOT / "docs" / "runs.md").read_text()
PACKAGE = ROOT / "precision_oat"


def _documented(key: str, page: str) -> bool:
    return f"`{key}`" in page


# --- concepts ---


@pytest.mark.parametrize("algo", list(RECIPES))
def test_every_recipe_is_in_the_recipe_table(algo):
    r = RECIPES[algo]
    row = f"| `{algo}` | `{r.advantage}` | `{r.objective}` | `{r.correction}` | `{r.reduction}` |"
    assert row in CONCEPTS, f"docs/concepts.md needs the row starting {row}"


@pytest.mark.parametrize("kind, name", [(kind, name) for kind in TABLES for name in valid_names(kind)])
def test_every_piece_name_is_in_concepts(kind, name):
    assert _documented(name, CONCEPTS), f"docs/concepts.md does not mention the {kind} `{name}`"


@pytest.mark.parametrize("field", [f.name for f in dataclasses.fields(PrecisionArgs)])
def test_every_precision_flag_is_in_concepts(field):
    assert _documented("--" + field.replace("_", "-"), CONCEPTS)


def test_the_composition_example_is_the_grpo_mis_learner():
    from precision_oat.learners.builtin import PrecisionLearner

    block = re.search(r"```python\n(.*?)```", CONCEPTS, re.S).group(1)
    assert "class L(SeqMISMixin, ClipMixin, DrGRPOMixin, ConstantNormMixin, PrecisionLearner)" in block
    namespace: dict = {}
    exec(block, namespace)
    composed = compose(resolve("grpo-mis", max_gen_length=8), PrecisionLearner)
    assert namespace["L"].__mro__[1:] == composed.__mro__[1:]


# --- metrics ---


def _batch(seed: int = 0) -> PolicyBatch:
    g = torch.Generator().manual_seed(seed)
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0], [1.0, 1.0, 0.0, 0.0], [1.0, 1.0, 1.0, 1.0]])
    logprobs = -torch.rand(3, 4, generator=g) - 0.1
    return PolicyBatch(
        logprobs=logprobs.requires_grad_(),
        old_logprobs=logprobs.detach() + 0.05 * torch.randn(3, 4, generator=g),
        sampler_logprobs=logprobs.detach() + 0.5 * torch.randn(3, 4, generator=g),
        advantages=torch.tensor([1.0, -0.5, 0.25]),
        mask=mask,
    )


def test_every_mismatch_metric_is_in_metrics():
    b = _batch()
    keys = mismatch_metrics(b.sampler_logprobs, b.old_logprobs, b.mask)
    assert len(keys) == 12
    missing = [k for k in keys if not _documented(k, METRICS)]
    assert not missing, f"docs/metrics.md lacks {missing}"


def test_every_mismatch_histogram_is_in_metrics():
    b = _batch()
    missing = [k for k in mismatch_histograms(b.sampler_logprobs, b.old_logprobs, b.mask) if not _documented(k, METRICS)]
    assert not missing, f"docs/metrics.md lacks {missing}"


@pytest.mark.parametrize(
    "objective, correction", list(itertools.product(TABLES["objective"], TABLES["correction"]))
)
def test_every_loss_statistic_is_in_metrics(objective, correction):
    spec = resolve("grpo", objective=objective, correction=correction, correction_cap=2.0, is_cap=2.0,
                   max_gen_length=4)
    _, stats = build_policy_loss(spec).policy_loss(_batch())
    missing = [k for k in stats if not _documented(k, METRICS)]
    assert not missing, f"{objective} × {correction} logs {missing}, absent from docs/metrics.md"


def test_every_metric_key_written_by_the_local_backend_is_in_metrics():
    # Literal keys such as "train/loss_scale" in the code that produces the local backend's log.
    sources = [*(PACKAGE / "backends" / "local").glob("*.py"), *(PACKAGE / "learners").glob("*.py"),
               *(PACKAGE / "rl").glob("*.py"), PACKAGE / "runs" / "log.py", *(PACKAGE / "algorithms").rglob("*.py")]
    keys = {k for path in sources for k in re.findall(r"""["']([a-z]+(?:/[a-z0-9_@]+)+)["']""", path.read_text())}
    keys = {k for k in keys if k.split("/")[0] in {"reward", "response", "perf", "train", "loss", "mismatch", "time",
                                                    "eval", "ratio", "precision"}}
    assert {"train/loss_scale", "reward/mean", "perf/train_tokens_per_s", "perf/time/sync"} <= keys  # the scan sees them
    missing = sorted(k for k in keys if not _documented(k, METRICS))
    assert not missing, f"docs/metrics.md lacks {missing}"


# --- runs ---


@pytest.mark.parametrize("field", [f.name for f in dataclasses.fields(LogArgs)])
def test_every_output_flag_is_in_runs(field):
    assert _documented(flag(field), RUNS), f"docs/runs.md does not list {flag(field)}"


def test_every_flag_a_resume_may_change_is_in_runs():
    section = RUNS[RUNS.index("## Resume"):]
    missing = [flag(name) for name in sorted(SAFE_ON_RESUME) if not _documented(flag(name), section)]
    assert not missing, f"the Resume section of docs/runs.md lacks {missing}"
