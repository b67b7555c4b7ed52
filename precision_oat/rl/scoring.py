"""The trainer's view of sampled tokens: log π of every next token from one full-sequence forward.

No learner is needed: any causal LM in any dtype scores a batch of right-padded sequences.
Rows are scored in micro-batches, each trimmed to its longest sequence, so the layout (and
with it the rounding) depends on the micro-batch size; see the trainer self-consistency
measurement of the mismatch lab.
"""

from __future__ import annotations

from typing import Optional

import torch

from precision_oat.rl.microbatch import micro_batches
from precision_oat.rl.truncation import Truncation, kept_set_logprobs


def trim(input_ids: torch.Tensor, attention_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Drop the padding columns that every row shares (sequences are right-padded)."""
    width = int(attention_mask.sum(-1).max())
    return input_ids[:, :width], attention_mask[:, :width]


# Positions per chunk of the fp32 log-softmax: 1024 × a 151,936-token vocabulary is 0.6 GB in fp32.
DEFAULT_CHUNK_SIZE = 1024


def logits_logprobs(logits: torch.Tensor, input_ids: torch.Tensor, temperature: float,
                    truncation: Optional[Truncation] = None, response_mask: Optional[torch.Tensor] = None,
                    chunk_size: int = DEFAULT_CHUNK_SIZE) -> torch.Tensor:
    """log softmax(logits / T) at each next token, in fp32, shape [B, L-1]; renormalised over the
    sampler's top-p kept sets where ``truncation`` has them (:mod:`~precision_oat.rl.truncation`).

    Only the positions where ``response_mask`` [B, L-1] is non-zero are scored (all without one);
    the others are 0. The fp32 softmax is taken ``chunk_size`` positions at a time, in the
    forward and again in the backward, so no fp32 tensor holds more than ``chunk_size`` rows of
    the vocabulary; the values are those of one full-vocabulary ``log_softmax``, bit for bit.
    """
    b, l, vocab = logits.shape
    scored = torch.ones(b, l - 1, dtype=torch.bool, device=logits.device) if response_mask is None \
        else response_mask.to(logits.device) != 0
    row, column = scored.nonzero(as_tuple=True)
    counts = kept_ids = None
    if truncation is not None:
        all_counts = truncation.counts.to(logits.device)
        kept_ids = truncation.ids.to(logits.device)[torch.repeat_interleave(scored.reshape(-1), all_counts.reshape(-1))]
        counts = all_counts[row, column]
    values = ChunkedLogprobs.apply(logits.reshape(b * l, vocab), row * l + column, input_ids[row, column + 1],
                                   temperature, chunk_size, counts, kept_ids)
    out = torch.zeros(b, l - 1, dtype=torch.float32, device=logits.device)
    return out.index_put((row, column), values)


class ChunkedLogprobs(torch.autograd.Function):
    """log softmax(z / T)[target] at some rows of [R, V] logits, in fp32, ``chunk_size`` rows at a time.

    Saved for the backward: the logits themselves (in their own dtype), the targets and one
    log-normaliser per row; each chunk's softmax is recomputed there.
    """

    @staticmethod
    def forward(ctx, logits: torch.Tensor, rows: torch.Tensor, targets: torch.Tensor, temperature: float,
                chunk_size: int, counts: Optional[torch.Tensor], kept_ids: Optional[torch.Tensor]) -> torch.Tensor:
        logprobs = torch.empty(len(rows), dtype=torch.float32, device=logits.device)
        log_norm = torch.empty_like(logprobs)
        for chunk, kept in _chunks(len(rows), chunk_size, counts, kept_ids):
            scaled = logits[rows[chunk]].float() / temperature
            target = targets[chunk]
            logprobs[chunk] = scaled.log_softmax(-1).gather(-1, target[:, None]).squeeze(-1)
            log_norm[chunk] = scaled.logsumexp(-1)
            if kept is not None:
                positions, renormalised, kept_log_norm = kept_set_logprobs(scaled, target, counts[chunk], kept)
                logprobs[chunk.start + positions] = renormalised
                log_norm[chunk.start + positions] = kept_log_norm
        ctx.save_for_backward(logits, rows, targets, log_norm, counts, kept_ids)
        ctx.temperature, ctx.chunk_size = temperature, chunk_size
        return logprobs

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_logprobs: torch.Tensor):
        logits, rows, targets, log_norm, counts, kept_ids = ctx.saved_tensors
        temperature = ctx.temperature
        grad_logits = torch.zeros_like(logits)
        for chunk, kept in _chunks(len(rows), ctx.chunk_size, counts, kept_ids):
            index = rows[chunk]
            scaled = logits[index].float() / temperature
            probs = (scaled - log_norm[chunk, None]).exp()
            if kept is not None:
                probs = _kept_only(probs, counts[chunk], kept)
            # d log p_y / dz = (onehot(y) − p) / T, times the incoming gradient of each row.
            grad = probs.mul_(-grad_logprobs[chunk, None])
            grad[torch.arange(len(index), device=grad.device), targets[chunk]] += grad_logprobs[chunk]
            grad_logits[index] = grad.div_(temperature).to(logits.dtype)
        return grad_logits, None, None, None, None, None, None


def _chunks(n: int, chunk_size: int, counts: Optional[torch.Tensor], kept_ids: Optional[torch.Tensor]):
    """(slice of ``chunk_size`` positions, their kept ids or None) over ``n`` positions."""
    ends = None if counts is None else counts.cumsum(0).tolist()
    for start in range(0, n, chunk_size):
        chunk = slice(start, min(start + chunk_size, n))
        if ends is None:
            yield chunk, None
        else:
            first = ends[start - 1] if start else 0
            yield chunk, kept_ids[first : ends[chunk.stop - 1]]


def _kept_only(probs: torch.Tensor, counts: torch.Tensor, kept_ids: torch.Tensor) -> torch.Tensor:
    """``probs`` with the rows that have a kept set zeroed outside it."""
    positions = counts.nonzero().squeeze(-1)
    owner = torch.repeat_interleave(positions, counts[positions])
    kept = probs[owner, kept_ids]
    probs[positions] = 0.0
    probs[owner, kept_ids] = kept
    return probs


def token_logprobs(model, input_ids: torch.Tensor, attention_mask: torch.Tensor, temperature: float,
                   truncation: Optional[Truncation] = None, response_mask: Optional[torch.Tensor] = None,
                   chunk_size: int = DEFAULT_CHUNK_SIZE) -> torch.Tensor:
    """log π(y_t | y_<t) of every next token where ``response_mask`` is set (0 elsewhere), [B, L-1],
    with the gradient if enabled."""
    logits = model(input_ids=input_ids, attention_mask=attention_mask).logits
    return logits_logprobs(logits, input_ids, temperature, truncation, response_mask, chunk_size)


@torch.no_grad()
def score(forward, input_ids: torch.Tensor, attention_mask: torch.Tensor, micro_batch_size: int,
          truncation: Optional[Truncation] = None, response_mask: Optional[torch.Tensor] = None,
          micro_batch_tokens: Optional[int] = None) -> torch.Tensor:
    """``forward(ids, mask, truncation=, response_mask=) -> [b, l-1]`` over micro-batches of rows,
    assembled into [B, L-1] (0 past each row's end and wherever ``response_mask`` is 0).

    With ``micro_batch_tokens`` the rows are packed by length so that no micro-batch pads to
    more tokens than that (:func:`~precision_oat.rl.microbatch.micro_batches`).

    ``forward`` is e.g. ``functools.partial(token_logprobs, model, temperature=T)``.
    """
    out = torch.zeros(input_ids.shape[0], input_ids.shape[1] - 1, device=input_ids.device)
    rows = torch.arange(input_ids.shape[0], device=input_ids.device)
    for index in micro_batches(rows, micro_batch_size, attention_mask.sum(-1), micro_batch_tokens):
        ids, mask = trim(input_ids[index], attention_mask[index])
        width = ids.shape[1] - 1
        part = None if truncation is None else truncation.select(index, width)
        positions = None if response_mask is None else response_mask[index, :width]
        out[index, :width] = forward(ids, mask, truncation=part, response_mask=positions).float()
    return out
