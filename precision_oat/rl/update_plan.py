"""Which responses go into which optimiser step, and the denominators that make micro-batches add up.

A rollout of N responses is passed over ``num_epochs`` times, each time in a fresh seeded
order, cut into mini-batches of ``train_batch_size`` responses (one optimiser step each),
each cut into micro-batches of ``micro_batch_size`` (one forward/backward each), or packed by
length under a token budget (``micro_batch_tokens``; :func:`~precision_oat.rl.microbatch.micro_batches`). Every
micro-batch's loss uses its *mini-batch's* sequence and token counts as denominators, so the
micro-batch losses sum to the loss of the whole mini-batch: accumulation 1×8 equals 8×1.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

import torch

from precision_oat.algorithms import PolicyBatch
from precision_oat.distributed.world import SINGLE, World
from precision_oat.rl.microbatch import chunks, micro_batches, passes_on_every_rank
from precision_oat.rl.rollout import Rollout


@dataclass
class MiniBatch:
    # Rows of the rollout in this optimiser step.
    index: torch.Tensor
    # This rank's share of those rows, cut into forward/backward passes.
    micro_batches: list[torch.Tensor]
    # Passes of no rows to run after them, so that every rank runs as many (rl.microbatch.passes_on_every_rank).
    padding: int = 0


def update_plan(num_sequences: int, train_batch_size: Optional[int], micro_batch_size: int, num_epochs: int,
                generator: torch.Generator, world: World = SINGLE, lengths: Optional[torch.Tensor] = None,
                micro_batch_tokens: Optional[int] = None) -> list[MiniBatch]:
    """Mini-batches of every epoch, in order (one fresh permutation per epoch).

    With ``micro_batch_tokens`` each mini-batch's rows are packed by their ``lengths`` (tokens
    of each sequence, [N]) so that no micro-batch pads to more than that many tokens.

    With several processes the plan is the one-process plan; a rank's micro-batches cover only
    its share of each mini-batch (``index`` stays the whole mini-batch, for the denominators), and
    a rank with fewer of them than another pads with passes of no rows.
    """
    batch_size = train_batch_size or num_sequences
    cut = lambda share: micro_batches(share, micro_batch_size, lengths, micro_batch_tokens)  # noqa: E731
    plan = []
    for _ in range(num_epochs):
        order = torch.randperm(num_sequences, generator=generator)
        for mini in chunks(order, batch_size):
            plan.append(MiniBatch(mini, *passes_on_every_rank(world, mini, cut)))
    return plan


def policy_batch(rollout: Rollout, old_logprobs: torch.Tensor, advantages: torch.Tensor, micro: torch.Tensor,
                 mini: MiniBatch, forward_logprobs: Callable) -> PolicyBatch:
    """The :class:`PolicyBatch` of one micro-batch: a forward with the gradient, the mini-batch's denominators."""
    micro = micro.to(rollout.input_ids.device)
    part = rollout.select(micro)
    width = part.input_ids.shape[1] - 1
    return PolicyBatch(
        logprobs=forward_logprobs(part.input_ids, part.attention_mask, truncation=part.truncation,
                                  response_mask=part.response_mask),
        old_logprobs=old_logprobs[micro, :width],
        sampler_logprobs=part.sampler_logprobs,
        advantages=advantages[micro],
        mask=part.response_mask,
        num_sequences=len(mini.index),
        num_tokens=float(rollout.response_mask[mini.index.to(rollout.input_ids.device)].sum().clamp(min=1)),
    )
