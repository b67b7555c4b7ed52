"""Every hook RLStep documents is a method a subclass can override, in each learner: the update calls the
subclass's version (the Oat learner's in tests/oat/test_oat_learner_hooks.py)."""

from __future__ import annotations

import pytest
import torch

from precision_oat.algorithms import compose
from precision_oat.args import algorithm_spec
from precision_oat.backends.local.driver import build_learner, learner_base
from precision_oat.rl.rollout import collate
from precision_oat.rl.settings import learner_settings
from precision_oat.samplers.kv_cache import KVCacheSampler
from precision_oat.samplers.sampler import SamplingParams
from tests.backends.helpers import make_args
from tests.conftest import tiny_model

# The learner hooks of RLStep and the algorithm hooks of PolicyLoss.
HOOKS = ("forward_logprobs", "backward", "optimizer_step", "precision_stats", "trainable_weights", "set_train",
         "compute_advantages", "objective", "correction", "reduce")


def recording_subclass(base: type, calls: list[str]) -> type:
    """A subclass of ``base`` overriding every hook with one that records its name and defers to the base."""

    def override(name):
        def hook(self, *args, **kwargs):
            calls.append(name)
            return getattr(super(cls, self), name)(*args, **kwargs)

        return hook

    cls = type(f"Recording{base.__name__}", (base,), {name: override(name) for name in HOOKS})
    return cls


@pytest.mark.parametrize("learner", ["builtin", "deepspeed"])
def test_a_subclass_overrides_every_hook_of_the_learner(learner):
    model = tiny_model()
    prompts = [[3, 4, 5], [6, 7]]
    completions = KVCacheSampler(model, torch.float32).generate(prompts, SamplingParams(n=2, max_new_tokens=4, seed=0))
    rollout = collate(completions, [0.0, 1.0, 1.0, 0.0], 2, pad_token_id=0)
    args = make_args(learner=learner, algo="grpo-tis", dtype="fp32", num_samples=2, micro_batch_size=2)
    calls: list[str] = []
    cls = recording_subclass(compose(algorithm_spec(args), learner_base(learner)), calls)
    learner_ = build_learner(model, learner_settings(args, torch.device("cpu")), learner_class=cls)
    learner_.update(rollout, step=0)
    assert set(calls) == set(HOOKS), sorted(set(HOOKS) - set(calls))
    # Four rows two at a time: both passes of the scoring and both of the update go through the override.
    assert calls.count("forward_logprobs") == 4
