"""What a learner is built from besides its model: one frozen :class:`LearnerSettings`, made once by
:func:`learner_settings` from the parsed flags.

Each flag group a learner reads is held whole, so no flag is copied into a field of its own: the
update reads its batch sizes, epochs and seed from ``train`` (``TrainArgs``), the scoring temperature
from ``rollout``, gradient checkpointing and compiled layers from ``model``. Both backends build it
with :func:`learner_settings`; Oat's learner then gives ``train`` its own share of the batch.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from precision_oat.algorithms import AlgorithmSpec
from precision_oat.args import Args, LoraArgs, ModelArgs, RolloutArgs, TrainArgs, algorithm_spec
from precision_oat.distributed.world import SINGLE, World
from precision_oat.precision.policy import Precision


@dataclass(frozen=True)
class LearnerSettings:
    """The typed pieces a learner reads (``self.settings``); ``self.precision`` and ``self.algo`` are two of them."""

    # The precision policy: trainer and master dtypes, loss scaling, the lm_head.
    precision: Precision
    # The resolved algorithm: which mixin fills each hook, and every constant the mixins read.
    algo: AlgorithmSpec
    # The learner's flags: optimiser, batch sizes, epochs, seed, where π_old comes from, chunking.
    train: TrainArgs = field(default_factory=TrainArgs)
    # The rollout's flags: the trainer scores logits / --temperature.
    rollout: RolloutArgs = field(default_factory=RolloutArgs)
    # The model's flags: --gradient-checkpointing, --compile-layers.
    model: ModelArgs = field(default_factory=ModelArgs)
    # LoRA adapters (rank 0 trains every weight).
    lora: LoraArgs = field(default_factory=LoraArgs)
    # Where the learner computes.
    device: torch.device = torch.device("cpu")
    # The processes that share each step (one by default); see :mod:`~precision_oat.distributed.world`.
    world: World = SINGLE


def learner_settings(args: Args, device: torch.device, world: World = SINGLE) -> LearnerSettings:
    """The learner's settings from the parsed flags: the one place they are made."""
    return LearnerSettings(precision=args.precision.build(), algo=algorithm_spec(args), train=args.train,
                           rollout=args.rollout, model=args.model, lora=args.lora, device=device, world=world)
