"""Reductions on ℓ = [[1, 2, 100], [3, 4, 5]] with mask [[1, 1, 0], [1, 1, 1]] (5 response tokens)."""

import pytest
import torch

from precision_oat.algorithms import (
    AlgorithmSpec, ConstantNormMixin, PolicyBatch, PolicyLoss, SeqMeanMixin, TokenMeanMixin,
)

F64 = dict(dtype=torch.float64)
LOSS = torch.tensor([[1.0, 2.0, 100.0], [3.0, 4.0, 5.0]], **F64)
MASK = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]], **F64)


def batch(rows=slice(None), **denominators):
    m = MASK[rows]
    zeros = torch.zeros_like(m)
    return PolicyBatch(zeros, zeros, zeros, torch.zeros(m.shape[0], **F64), m, **denominators)


def make(mixin, loss_constant=4.0):
    loss = type("L", (mixin, PolicyLoss), {})()
    loss.algo = AlgorithmSpec("drgrpo", "pg", "none", "x", loss_constant=loss_constant)
    return loss


# token-mean: (1+2+3+4+5)/5 = 3;  seq-mean: ((1+2)/2 + (3+4+5)/3)/2 = (1.5 + 4)/2 = 2.75;
# constant (L = 4): (1+2+3+4+5)/4/2 = 1.875
CASES = [(TokenMeanMixin, 3.0), (SeqMeanMixin, 2.75), (ConstantNormMixin, 1.875)]


@pytest.mark.parametrize("mixin, expected", CASES)
def test_reduction_value(mixin, expected):
    assert make(mixin).reduce(LOSS, batch()).item() == pytest.approx(expected, abs=1e-12)


def test_policy_loss_default_reduction_is_the_token_mean():
    assert PolicyLoss.reduce(None, LOSS, batch()).item() == pytest.approx(3.0, abs=1e-12)


@pytest.mark.parametrize("mixin, expected", CASES)
def test_micro_batch_losses_add_up_to_the_full_batch_loss(mixin, expected):
    loss_fn = make(mixin)
    halves = [loss_fn.reduce(LOSS[r], batch(r, num_sequences=2, num_tokens=5.0)) for r in (slice(0, 1), slice(1, 2))]
    assert sum(h.item() for h in halves) == pytest.approx(expected, abs=1e-12)


def test_constant_normaliser_ignores_response_length():
    # Dr.GRPO: one sequence of 2 tokens and one of 4, each token loss 1, L = 8:
    # per sequence 2/8 and 4/8, so the longer one counts twice as much; mean over 2 sequences = 0.375
    mask = torch.tensor([[1.0, 1.0, 0.0, 0.0], [1.0, 1.0, 1.0, 1.0]], **F64)
    b = PolicyBatch(mask, mask, mask, torch.zeros(2, **F64), mask)
    assert make(ConstantNormMixin, 8.0).reduce(torch.ones_like(mask), b).item() == pytest.approx(0.375, abs=1e-12)
    # seq-mean would give every sequence weight ½ whatever its length: (1 + 1)/2 = 1
    assert make(SeqMeanMixin).reduce(torch.ones_like(mask), b).item() == pytest.approx(1.0, abs=1e-12)
