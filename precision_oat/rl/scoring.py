"""The trainer's view of sampled tokens: log π of every next token from one full-sequence forward.

No learner is needed: any causal LM in any dtype scores a batch of right-padded sequences.
Rows are scored in micro-batches, each trimmed to its longest sequence, so the layout (and
with it the rounding) depends on the micro-batch size; see the trainer self-consistency
measurement of the mismatch lab.
"""

from __future__ import annotations

from typing import Optional

import torch

from precision_oat.rl.microbatch import chunks
from precision_oat.rl.truncation import Truncation, renormalised_logprobs


def trim(input_ids: torch.Tensor, attention_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Drop the padding columns that every row shares (sequences are right-padded)."""
    width = int(attention_mask.sum(-1).max())
    return input_ids[:, :width], attention_mask[:, :width]


def logits_logprobs(logits: torch.Tensor, input_ids: torch.Tensor, temperature: float,
                    truncation: Optional[Truncation] = None) -> torch.Tensor:
    """log softmax(logits / T) at each next token, in fp32, shape [B, L-1]; renormalised over the
    sampler's top-p kept sets where ``truncation`` has them (:mod:`~precision_oat.rl.truncation`)."""
    scaled = logits[:, :-1].float() / temperature
    targets = input_ids[:, 1:]
    logps = scaled.log_softmax(-1).gather(-1, targets[..., None]).squeeze(-1)
    if truncation is None:
        return logps
    return renormalised_logprobs(scaled, targets, logps, truncation)


def token_logprobs(model, input_ids: torch.Tensor, attention_mask: torch.Tensor, temperature: float,
                   truncation: Optional[Truncation] = None) -> torch.Tensor:
    """log π(y_t | y_<t) of every next token, [B, L-1], with the gradient if enabled."""
    logits = model(input_ids=input_ids, attention_mask=attention_mask).logits
    return logits_logprobs(logits, input_ids, temperature, truncation)


def call_forward(forward, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                 truncation: Optional[Truncation] = None) -> torch.Tensor:
    """``forward(ids, mask)``, passing ``truncation=`` only when there is one (engines whose forward
    cannot take it are never given top-p rollouts)."""
    if truncation is None:
        return forward(input_ids, attention_mask)
    return forward(input_ids, attention_mask, truncation=truncation)


@torch.no_grad()
def score(forward, input_ids: torch.Tensor, attention_mask: torch.Tensor, micro_batch_size: int,
          truncation: Optional[Truncation] = None) -> torch.Tensor:
    """``forward(ids, mask) -> [b, l-1]`` over micro-batches of rows, assembled into [B, L-1] (0 past each row's end).

    ``forward`` is e.g. ``functools.partial(token_logprobs, model, temperature=T)``.
    """
    out = torch.zeros(input_ids.shape[0], input_ids.shape[1] - 1, device=input_ids.device)
    for index in chunks(torch.arange(input_ids.shape[0], device=input_ids.device), micro_batch_size):
        ids, mask = trim(input_ids[index], attention_mask[index])
        part = None if truncation is None else truncation.select(index, ids.shape[1] - 1)
        out[index, : ids.shape[1] - 1] = call_forward(forward, ids, mask, part).float()
    return out
