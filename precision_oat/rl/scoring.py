"""The trainer's view of sampled tokens: log π of every next token from one full-sequence forward.

No learner is needed: any causal LM in any dtype scores a batch of right-padded sequences.
Rows are scored in micro-batches, each trimmed to its longest sequence, so the layout (and
with it the rounding) depends on the micro-batch size; see the trainer self-consistency
measurement of the mismatch lab.

The vocabulary is never held whole: the model's body gives the hidden states, and the output
projection and the fp32 log-softmax run a chunk of response positions at a time, recomputed in
the backward. Scoring memory grows with rows × length × hidden, and with the vocabulary only
by one chunk (at 8k tokens and Qwen2.5's 151,936 tokens, a micro-batch of 8 would otherwise
hold 19 GiB of fp16 logits and as much again for their gradient).
"""

from __future__ import annotations

import functools
from typing import Callable, Optional

import torch
from torch.utils.checkpoint import checkpoint

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
                    chunk_size: int = DEFAULT_CHUNK_SIZE, compiled: bool = False) -> torch.Tensor:
    """log softmax(logits / T) at each next token, in fp32, shape [B, L-1]; renormalised over the
    sampler's top-p kept sets where ``truncation`` has them (:mod:`~precision_oat.rl.truncation`).

    Only the positions where ``response_mask`` [B, L-1] is non-zero are scored (all without one);
    the others are 0. The fp32 softmax is taken ``chunk_size`` positions at a time, in the
    forward and again in the backward, so no fp32 tensor holds more than ``chunk_size`` rows of
    the vocabulary; the values are those of one full-vocabulary ``log_softmax``, bit for bit.

    ``compiled`` fuses each chunk's passes over the vocabulary with ``torch.compile``
    (:class:`ChunkedLogprobs`); the values are then those of the log-softmax to fp32 rounding.
    """
    b, l, vocab = logits.shape
    scored = _scored(response_mask, b, l, logits.device)
    row, column = scored.nonzero(as_tuple=True)
    counts, kept_ids = _kept_sets(truncation, scored)
    values = ChunkedLogprobs.apply(logits.reshape(b * l, vocab), row * l + column, input_ids[row, column + 1],
                                   temperature, chunk_size, counts, kept_ids, compiled)
    out = torch.zeros(b, l - 1, dtype=torch.float32, device=logits.device)
    return out.index_put((row, column), values)


class ChunkedLogprobs(torch.autograd.Function):
    """log softmax(z / T)[target] at some rows of [R, V] logits (every row, in order, for ``rows=None``),
    in fp32, ``chunk_size`` rows at a time.

    Saved for the backward: the logits themselves (in their own dtype), the targets and one
    log-normaliser per row; each chunk's softmax is recomputed there. At the vocabulary's width
    every pass over a chunk counts (a sixth of a 1.5B model's update), so none is made twice.

    Eagerly, each pass writes an fp32 tensor of the chunk's width (the cast, the log-softmax, the
    softmax and the gradient). ``compiled`` runs the chunks without a top-p kept set through
    ``torch.compile`` instead (:func:`_fused_logprobs`, :func:`_fused_gradient`), which reads a chunk's
    logits once or twice and writes nothing of its width but their gradient, in their dtype.
    """

    @staticmethod
    def forward(ctx, logits: torch.Tensor, rows: Optional[torch.Tensor], targets: torch.Tensor, temperature: float,
                chunk_size: int, counts: Optional[torch.Tensor], kept_ids: Optional[torch.Tensor],
                compiled: bool = False) -> torch.Tensor:
        n = len(logits) if rows is None else len(rows)
        logprobs = torch.empty(n, dtype=torch.float32, device=logits.device)
        log_norm = torch.empty_like(logprobs)
        for chunk, kept in _chunks(n, chunk_size, counts, kept_ids):
            if compiled and kept is None:
                logprobs[chunk], log_norm[chunk] = _compiled(_fused_logprobs)(
                    _rows(logits, rows, chunk), targets[chunk], temperature)
                continue
            scaled = _scaled(logits, rows, chunk, temperature)
            target = targets[chunk]
            logprobs[chunk] = scaled.log_softmax(-1).gather(-1, target[:, None]).squeeze(-1)
            # log Σ exp, from the log-softmax just taken rather than a pass of its own.
            log_norm[chunk] = scaled.gather(-1, target[:, None]).squeeze(-1) - logprobs[chunk]
            if kept is not None:
                positions, renormalised, kept_log_norm = kept_set_logprobs(scaled, target, counts[chunk], kept)
                logprobs[chunk.start + positions] = renormalised
                log_norm[chunk.start + positions] = kept_log_norm
        ctx.save_for_backward(logits, rows, targets, log_norm, counts, kept_ids)
        ctx.temperature, ctx.chunk_size, ctx.compiled = temperature, chunk_size, compiled
        return logprobs

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_logprobs: torch.Tensor):
        logits, rows, targets, log_norm, counts, kept_ids = ctx.saved_tensors
        temperature = ctx.temperature
        # Every row gets its gradient written when there is no row index; only the indexed ones otherwise.
        grad_logits = torch.empty_like(logits) if rows is None else torch.zeros_like(logits)
        for chunk, kept in _chunks(len(grad_logprobs), ctx.chunk_size, counts, kept_ids):
            if ctx.compiled and kept is None:
                grad = _compiled(_fused_gradient)(_rows(logits, rows, chunk), targets[chunk], log_norm[chunk],
                                                  grad_logprobs[chunk], temperature)
            else:
                probs = (_scaled(logits, rows, chunk, temperature) - log_norm[chunk, None]).exp_()
                if kept is not None:
                    probs = _kept_only(probs, counts[chunk], kept)
                # d log p_y / dz = (onehot(y) − p) / T, times the incoming gradient of each row.
                grad = probs.mul_(-grad_logprobs[chunk, None])
                grad[torch.arange(len(grad), device=grad.device), targets[chunk]] += grad_logprobs[chunk]
                if temperature != 1.0:
                    grad.div_(temperature)
            if rows is None:
                grad_logits[chunk] = grad  # cast to the logits' dtype by the copy
            else:
                grad_logits[rows[chunk]] = grad.to(logits.dtype)
        return grad_logits, None, None, None, None, None, None, None


def _rows(logits: torch.Tensor, rows: Optional[torch.Tensor], chunk: slice) -> torch.Tensor:
    """A chunk's logits, in their dtype."""
    return logits[chunk] if rows is None else logits[rows[chunk]]


def _scaled(logits: torch.Tensor, rows: Optional[torch.Tensor], chunk: slice, temperature: float) -> torch.Tensor:
    """A chunk's logits in fp32 over the temperature (dividing by 1 would change nothing and cost a pass)."""
    part = _rows(logits, rows, chunk).float()
    return part if temperature == 1.0 else part / temperature


def _fused_logprobs(logits: torch.Tensor, targets: torch.Tensor, temperature: float):
    """log softmax(z / T) at the targets, and log Σ exp(z / T), of [rows, V] logits: written for
    ``torch.compile``, which fuses the cast, the scaling and the reductions into passes that write
    nothing of the vocabulary's width."""
    scaled = logits.float() / temperature
    log_norm = scaled.logsumexp(-1)
    return scaled.gather(-1, targets[:, None]).squeeze(-1) - log_norm, log_norm


def _fused_gradient(logits: torch.Tensor, targets: torch.Tensor, log_norm: torch.Tensor, grad_logprobs: torch.Tensor,
                    temperature: float) -> torch.Tensor:
    """d/dz of Σ grad · log softmax(z / T) at the targets, (onehot(y) − p) / T · grad, in the logits' dtype:
    written for ``torch.compile``, which makes it one element-wise pass."""
    onehot = torch.arange(logits.shape[-1], device=logits.device) == targets[:, None]
    probs = (logits.float() / temperature - log_norm[:, None]).exp()
    return ((onehot.float() - probs) * (grad_logprobs / temperature)[:, None]).to(logits.dtype)


@functools.cache
def _compiled(function: Callable) -> Callable:
    """``function`` through ``torch.compile``, made once; the number of rows varies from chunk to chunk."""
    return torch.compile(function, dynamic=True)


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
                   chunk_size: int = DEFAULT_CHUNK_SIZE, compiled: bool = False,
                   head_calls: Optional[Callable[[int], int]] = None, recompute_head: bool = True) -> torch.Tensor:
    """log π(y_t | y_<t) of every next token where ``response_mask`` is set (0 elsewhere), [B, L-1],
    with the gradient if enabled.

    ``model`` is an HF causal LM, or a wrapper of one that keeps it as ``.module`` (a DeepSpeed
    engine). Its body runs once; its output projection runs in chunks (:func:`hidden_logprobs`).
    A model that transforms its logits after the projection (a soft cap, a scale) is scored from
    its full logits instead. ``compiled``: see :func:`logits_logprobs`; ``head_calls`` and
    ``recompute_head``: see :func:`hidden_logprobs`.
    """
    causal_lm = getattr(model, "module", model)
    body = causal_lm.get_decoder()
    mask = padding_mask(attention_mask)
    return causal_lm_logprobs(
        causal_lm, lambda: body(input_ids=input_ids, attention_mask=mask, use_cache=False).last_hidden_state,
        lambda: model(input_ids=input_ids, attention_mask=mask).logits,
        input_ids, temperature, truncation, response_mask, chunk_size, compiled, head_calls, recompute_head)


def padding_mask(attention_mask: torch.Tensor) -> Optional[torch.Tensor]:
    """The mask a causal LM needs for these rows: none where every row is right-padded.

    Causal attention never lets a token see the padding after it, so a right-padded row's tokens
    get the same values without the mask. Without one, torch's SDPA can take its flash kernel;
    a padding mask sends it to the memory-efficient one, which took a third of SmolLM2's update
    on an H200 (docs/results.md §4d). Left-padded or gapped rows keep their mask.
    """
    return None if bool((attention_mask[:, 1:] <= attention_mask[:, :-1]).all()) else attention_mask


def causal_lm_logprobs(causal_lm, hidden_states: Callable[[], torch.Tensor], logits: Callable[[], torch.Tensor],
                       input_ids: torch.Tensor, temperature: float, truncation: Optional[Truncation] = None,
                       response_mask: Optional[torch.Tensor] = None, chunk_size: int = DEFAULT_CHUNK_SIZE,
                       compiled: bool = False, head_calls: Optional[Callable[[int], int]] = None,
                       recompute_head: bool = True) -> torch.Tensor:
    """:func:`token_logprobs` for a caller that runs the forward its own way: ``hidden_states()`` runs the
    body of the HF causal LM ``causal_lm``, ``logits()`` the whole model, and only one of them is called
    (the whole model where its logits are more than the projection of the last hidden state)."""
    if projects_plainly(causal_lm.config):
        return hidden_logprobs(hidden_states(), causal_lm.get_output_embeddings(), input_ids, temperature, truncation,
                               response_mask, chunk_size, compiled, head_calls, recompute_head)
    return logits_logprobs(logits(), input_ids, temperature, truncation, response_mask, chunk_size, compiled)


def projects_plainly(config) -> bool:
    """True when a causal LM's logits are its output projection of the last hidden state, nothing more."""
    capped = getattr(config, "final_logit_softcapping", None) is not None
    return not capped and getattr(config, "logit_scale", None) in (None, 1.0)


def hidden_logprobs(hidden: torch.Tensor, head: torch.nn.Module, input_ids: torch.Tensor, temperature: float,
                    truncation: Optional[Truncation] = None, response_mask: Optional[torch.Tensor] = None,
                    chunk_size: int = DEFAULT_CHUNK_SIZE, compiled: bool = False,
                    head_calls: Optional[Callable[[int], int]] = None, recompute_head: bool = True) -> torch.Tensor:
    """log softmax(head(hidden) / T) at each next token, in fp32, shape [B, L-1], as :func:`logits_logprobs`
    gives it from the full logits, but with ``head`` applied ``chunk_size`` scored positions at a time.

    With the gradient on and more than one chunk, each chunk is checkpointed: its logits are dropped after the
    forward and made again in the backward, so no tensor of any dtype holds more than ``chunk_size`` rows of the
    vocabulary; ``recompute_head=False`` keeps every chunk's logits instead, for a learner whose engine cannot
    run the head again inside the backward. ``head`` is called as a module, so that its hooks (ZeRO-3's
    gathering) run each time. Under ZeRO-3 over several ranks each call gathers the head's weight with every
    rank, so every rank must call it as often: ``head_calls(chunks)`` is the number of calls every rank makes,
    given this rank's number of chunks (the most of any rank); calls past this rank's chunks project no rows.
    """
    b, l, width = hidden.shape
    scored = _scored(response_mask, b, l, hidden.device)
    row, column = scored.nonzero(as_tuple=True)
    states = hidden.reshape(b * l, width)[row * l + column]
    targets = input_ids[row, column + 1]
    counts, kept_ids = _kept_sets(truncation, scored)
    # At least one chunk, empty if need be, so that the result carries a gradient even with nothing to score.
    chunks = list(_chunks(len(row), chunk_size, counts, kept_ids)) or [(slice(0, 0), kept_ids)]
    if head_calls is not None:
        nothing = (slice(0, 0), None if kept_ids is None else kept_ids[:0])
        chunks += [nothing] * (head_calls(len(chunks)) - len(chunks))
    # Scoring without the gradient (π_old) has nothing to recompute, and one chunk's logits may as well be kept.
    recompute = recompute_head and torch.is_grad_enabled() and len(chunks) > 1
    pieces = []
    for chunk, kept in chunks:
        args = (head, states[chunk], targets[chunk], temperature, None if counts is None else counts[chunk], kept,
                compiled)
        pieces.append(checkpoint(_projected_logprobs, *args, use_reentrant=False) if recompute
                      else _projected_logprobs(*args))
    out = torch.zeros(b, l - 1, dtype=torch.float32, device=hidden.device)
    return out.index_put((row, column), torch.cat(pieces))


def _projected_logprobs(head: torch.nn.Module, states: torch.Tensor, targets: torch.Tensor, temperature: float,
                        counts: Optional[torch.Tensor], kept_ids: Optional[torch.Tensor], compiled: bool) -> torch.Tensor:
    """One chunk: its logits, then their fp32 log-softmax at the targets (in one piece)."""
    return ChunkedLogprobs.apply(head(states), None, targets, temperature, max(len(states), 1), counts, kept_ids,
                                 compiled)


def _scored(response_mask: Optional[torch.Tensor], b: int, l: int, device) -> torch.Tensor:
    """[B, L-1] bool: every next-token position, or those where ``response_mask`` is set."""
    if response_mask is None:
        return torch.ones(b, l - 1, dtype=torch.bool, device=device)
    return response_mask.to(device) != 0


def _kept_sets(truncation: Optional[Truncation], scored: torch.Tensor):
    """The kept-set sizes at the scored positions (row-major), and their ids in that order; (None, None)
    without top-p."""
    if truncation is None:
        return None, None
    counts = truncation.counts.to(scored.device)
    kept_ids = truncation.ids.to(scored.device)[torch.repeat_interleave(scored.reshape(-1), counts.reshape(-1))]
    return counts[scored], kept_ids


@torch.no_grad()
def score(forward, input_ids: torch.Tensor, attention_mask: torch.Tensor, micro_batch_size: int,
          truncation: Optional[Truncation] = None, response_mask: Optional[torch.Tensor] = None,
          micro_batch_tokens: Optional[int] = None, padding: int = 0) -> torch.Tensor:
    """``forward(ids, mask, truncation=, response_mask=) -> [b, l-1]`` over micro-batches of rows,
    assembled into [B, L-1] (0 past each row's end and wherever ``response_mask`` is 0).

    With ``micro_batch_tokens`` the rows are packed by length so that no micro-batch pads to
    more tokens than that (:func:`~precision_oat.rl.microbatch.micro_batches`). ``padding`` more
    forwards of the first row, their result dropped, follow (a rank with fewer passes than another
    runs them: under ZeRO-3 every forward gathers the weights, with every rank).

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
    for _ in range(padding):
        ids, mask = trim(input_ids[:1], attention_mask[:1])
        forward(ids, mask, response_mask=None if response_mask is None else response_mask[:1, : ids.shape[1] - 1])
    return out
