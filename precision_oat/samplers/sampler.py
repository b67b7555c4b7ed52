"""The sampler seam: what any sampler (built-in KV-cache, vLLM) takes and returns.

A sampler owns its own copy of the policy weights in the sampler dtype. The learner
pushes new weights with :meth:`Sampler.load_weights` after every update; the sampler
casts them itself. The log-probabilities it returns are those of the distribution it
actually sampled from (after temperature and top-p, renormalised over the tokens top-p kept), in
its own precision: that is μ.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Optional, Protocol

import torch


@dataclass(frozen=True)
class SamplingParams:
    # Samples per prompt (G).
    n: int = 1
    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 64
    # Generation stops after any of these ids; the stop token is part of the response.
    stop_token_ids: tuple[int, ...] = ()
    # The batch's seed. Response k of prompt i draws from its own stream, that of row
    # (first_prompt + i)·n + k (seeds.row_seed), so a response depends on its prompt, its place in
    # the batch and the seed, never on the other rows sampled with it.
    seed: Optional[int] = None
    # Where these prompts start in the step's whole batch (a data-parallel rank samples a slice).
    first_prompt: int = 0
    # Return each token's top-p kept set (Completion.kept_ids), so the trainer can score under the
    # same truncated distribution; only samplers that can report it honour this.
    kept_sets: bool = False


@dataclass
class Completion:
    """One sampled response to one prompt."""

    prompt_ids: list[int]
    response_ids: list[int]
    # log μ(y_t | y_<t) of each response token, as computed by the sampler.
    logprobs: list[float]
    # True when the response ended on a stop token, False when it hit max_new_tokens.
    finished: bool
    # Per response token, the ids top-p kept when it was drawn (only with SamplingParams.kept_sets
    # and top_p < 1); its log μ above is renormalised over exactly these.
    kept_ids: Optional[list[list[int]]] = None


class Sampler(Protocol):
    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Completion]:
        """G = params.n completions per prompt, prompt-major: [p0s0, p0s1, …, p1s0, …]."""
        ...

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Replace the sampler's weights with these (HF parameter names, any dtype), read once, in order."""
        ...

    def sleep(self) -> None:
        """Free what the sampler can while the learner updates (a co-located vLLM's GPU memory); the
        next ``load_weights`` wakes it. A no-op where there is nothing to free."""
        ...

    def weights_for_check(self) -> dict[str, torch.Tensor]:
        """HF name → the tensor the sampler computes with, for the tensors whose weight sync can be
        checked bit for bit (:mod:`~precision_oat.precision.weight_sync`); empty when none can."""
        ...


def stop_token_ids(tokenizer) -> tuple[int, ...]:
    """The ids that end a response: the tokenizer's EOS plus any ``stop_token_ids`` it declares."""
    return tuple(sorted({tokenizer.eos_token_id, *getattr(tokenizer, "stop_token_ids", ())} - {None}))
