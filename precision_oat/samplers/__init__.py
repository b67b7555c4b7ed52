"""Samplers behind the seam of :mod:`precision_oat.samplers.sampler`, shared by every backend.

    builtin       KV-cache decoding on a private copy of the weights (any device, no vLLM)
    vllm_sampler  an in-process vLLM engine (imported only when built)
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import torch

from precision_oat.args import RolloutArgs
from precision_oat.distributed.world import SINGLE, World
from precision_oat.errors import SAMPLER_MEMORY_FLAGS, out_of_memory_explained
from precision_oat.precision.policy import Precision


def build_sampler(policy, precision: Precision, device: torch.device, rollout: RolloutArgs, seed: int,
                  folder: Optional[Path] = None, longest_response: Optional[int] = None, partial_pushes: bool = False,
                  world: World = SINGLE):
    """The ``--sampler`` of a run, holding its own copy of ``policy``'s weights in the sampler dtype.

    ``folder`` is where vLLM may save a policy that has no checkpoint folder of its own;
    ``longest_response`` bounds vLLM's context (default ``--max-new-tokens``); ``partial_pushes``:
    the learner exports part of the model (LoRA), so vLLM keeps its CPU copy. Running out of GPU
    memory while it starts is one :class:`~precision_oat.errors.UserError` line naming the flags to lower.
    Under ``torchrun`` every rank starts its engine here, together; a start that fails on one rank
    stops every rank with one line naming it (:meth:`~precision_oat.distributed.world.World.start_together`).
    """
    def start():
        with out_of_memory_explained(f"the {rollout.sampler} sampler's start", SAMPLER_MEMORY_FLAGS):
            return _start_sampler(policy, precision, device, rollout, seed, folder, longest_response, partial_pushes)

    return world.start_together(f"the {rollout.sampler} sampler's start", start)


def _start_sampler(policy, precision: Precision, device: torch.device, rollout: RolloutArgs, seed: int,
                   folder: Optional[Path], longest_response: Optional[int], partial_pushes: bool):
    if rollout.sampler == "vllm":
        from precision_oat.samplers.vllm_sampler import vllm_sampler_for

        return vllm_sampler_for(policy, precision, rollout, seed, folder,
                                longest_response or rollout.max_new_tokens, partial_pushes)
    from precision_oat.samplers.kv_cache import KVCacheSampler

    return KVCacheSampler(policy.model, precision.sampler_dtype, device, policy.tokenizer.pad_token_id,
                          fp32_head=precision.fp32_head)
