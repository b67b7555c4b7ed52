"""One learner family: a base that owns the model, a DeepSpeed mixin both DeepSpeed learners share, one decay rule."""

import torch

from precision_oat.learners.builtin import PrecisionLearner
from precision_oat.learners.deepspeed_hooks import DeepSpeedHooks
from precision_oat.learners.deepspeed_learner import DeepSpeedLearner
from precision_oat.learners.learner import Learner
from precision_oat.learners.weight_decay import decay_groups
from tests.conftest import tiny_model
from tests.backends.test_local_learner import build


def test_biases_and_norm_scales_take_no_weight_decay():
    model = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.LayerNorm(2))
    # Linear: weight [2, 3] decays, bias [2] does not; LayerNorm: weight [2] and bias [2] do not.
    decay, exempt = decay_groups(model.named_parameters(), 0.1)
    assert decay["weight_decay"] == 0.1 and [p.shape for p in decay["params"]] == [torch.Size([2, 3])]
    assert exempt["weight_decay"] == 0.0 and len(exempt["params"]) == 3


def test_the_deepspeed_learner_inherits_no_state_of_the_builtin_one():
    assert not issubclass(DeepSpeedLearner, PrecisionLearner)
    assert issubclass(DeepSpeedLearner, Learner) and issubclass(DeepSpeedLearner, DeepSpeedHooks)
    assert not hasattr(DeepSpeedLearner, "state_dict") and not hasattr(DeepSpeedLearner, "load_state_dict")


def test_both_local_learners_exempt_biases_and_norm_scales_from_weight_decay():
    # Counted in elements: DeepSpeed's optimisers may hold the masters flattened.
    named = list(tiny_model().named_parameters())
    want = {0.5: sum(p.numel() for _, p in named if p.ndim == 2), 0.0: sum(p.numel() for _, p in named if p.ndim == 1)}
    flags = dict(dtype="bf16", algo="grpo", num_samples=2, micro_batch_size=4, weight_decay=0.5)
    for learner in (build(tiny_model(), **flags), build(tiny_model(), learner="deepspeed", **flags)):
        optimizer = learner.optimizer if isinstance(learner, PrecisionLearner) else learner.engine.optimizer
        groups = getattr(optimizer, "optimizer", optimizer).param_groups
        got = {wd: sum(p.numel() for g in groups if g["weight_decay"] == wd for p in g["params"]) for wd in want}
        assert got == want, type(learner).__name__
