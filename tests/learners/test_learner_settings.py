"""A learner's settings are made in one place from the parsed flags, and each flag reaches the learner through them."""

import copy
import dataclasses

import pytest
import torch

from precision_oat.algorithms import AlgorithmSpec
from precision_oat.args import AlgorithmArgs, Args, algorithm_spec
from precision_oat.backends.local.driver import build_learner
from precision_oat.learners.builtin import PrecisionLearner
from precision_oat.presets import parse_args
from precision_oat.rl.settings import learner_settings
from tests.backends.helpers import make_args
from tests.conftest import tiny_model

CPU = torch.device("cpu")


def test_the_settings_hold_the_parsed_flag_groups_and_what_they_resolve_to():
    args = parse_args(["--dtype", "bf16", "--algo", "grpo-tis", "--correction-cap", "3", "--micro-batch-size", "3",
                       "--temperature", "0.5", "--lora-rank", "2", "--gradient-checkpointing"])
    settings = learner_settings(args, CPU)
    # The groups themselves, not copies of their fields: a flag has one home.
    assert settings.train is args.train and settings.rollout is args.rollout
    assert settings.model is args.model and settings.lora is args.lora
    assert settings.precision == args.precision.build() and settings.precision.trainer == "bf16"
    assert settings.algo == algorithm_spec(args) and settings.algo.correction_cap == 3.0
    assert settings.device == CPU and settings.world.size == 1
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.device = torch.device("cuda")


def test_the_temperature_flag_reaches_the_learners_scoring():
    model = tiny_model()
    reference = copy.deepcopy(model).eval()
    learner = build_learner(model, learner_settings(make_args(dtype="fp32", temperature=0.5), CPU))
    ids = torch.tensor([[3, 4, 5, 6, 7, 8]])
    with torch.no_grad():
        got = learner.forward_logprobs(ids, torch.ones_like(ids))
        logits = reference(ids).logits[:, :-1].float()
    # log π(x_{t+1}) = log_softmax(logits_t / T)[x_{t+1}] with T = 0.5, in fp32 on the same weights.
    want = torch.log_softmax(logits / 0.5, -1).gather(-1, ids[:, 1:, None]).squeeze(-1)
    untempered = torch.log_softmax(logits, -1).gather(-1, ids[:, 1:, None]).squeeze(-1)
    assert torch.allclose(got, want, atol=1e-6, rtol=1e-5)
    assert (got - untempered).abs().max() > 1e-3  # T matters here, so the match above is the flag's doing


@pytest.mark.parametrize("kind", ["builtin", "deepspeed"])
def test_the_optimiser_and_batch_flags_reach_both_learners(kind):
    args = make_args(learner=kind, dtype="fp32", learning_rate=3e-3, adam_betas=(0.8, 0.95), micro_batch_size=2)
    learner = build_learner(tiny_model(), learner_settings(args, CPU))
    optimizer = learner.optimizer if isinstance(learner, PrecisionLearner) else learner.engine.optimizer
    groups = getattr(optimizer, "optimizer", optimizer).param_groups
    assert {(g["lr"], tuple(g["betas"])) for g in groups} == {(3e-3, (0.8, 0.95))}
    assert learner.settings.train.micro_batch_size == 2
    if kind == "deepspeed":
        assert learner.engine.train_micro_batch_size_per_gpu() == 2


def test_the_algorithm_flags_default_to_the_specs_constants():
    # The flags whose default is a constant (not None, "keep the recipe's") take it from AlgorithmSpec, so
    # the resolved spec of the default flags carries the spec's own defaults.
    spec_defaults = {f.name: f.default for f in dataclasses.fields(AlgorithmSpec)}
    constants = [f.name for f in dataclasses.fields(AlgorithmArgs) if f.name in spec_defaults and f.default is not None]
    assert len(constants) == 8
    resolved = algorithm_spec(Args())
    assert {n: getattr(resolved, n) for n in constants} == {n: spec_defaults[n] for n in constants}
