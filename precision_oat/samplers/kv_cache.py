"""The built-in sampler: its own copy of the weights in the sampler dtype, KV-cache decoding.

This is deliberately *not* the learner's code path. The learner scores a whole sequence
in one HF forward; the sampler runs a prefill over the prompt and then one token at a
time against a KV cache, in its own dtype, through its own decoder
(:mod:`~precision_oat.samplers.decoder`) for Llama-family models and through HF's
cached forward otherwise. Same weights, same math, different kernels, shapes and
rounding: the gap between the log-probs the two report is the physical
training-inference mismatch, as with vLLM, not a simulated one.
"""

from __future__ import annotations

import copy
from typing import Iterable

import torch

from precision_oat.precision.lm_head import use_fp32_head
from precision_oat.precision.policy import TORCH_DTYPES, PrecisionError
from precision_oat.samplers.decoder import Decoder, supports
from precision_oat.samplers.sampler import Completion, SamplingParams
from precision_oat.seeds import row_seed


def top_p_keep(logits: torch.Tensor, top_p: float) -> torch.Tensor:
    """The nucleus of each row as a boolean mask: the most likely tokens until their mass reaches ``top_p``."""
    sorted_logits, order = logits.sort(dim=-1, descending=True)
    probs = sorted_logits.softmax(-1)
    # Drop a token once the mass before it already reaches top_p (the first always stays).
    drop = (probs.cumsum(-1) - probs) >= top_p
    return torch.zeros_like(drop).scatter(-1, order, ~drop)


def sample_next(logits: torch.Tensor, temperature: float, top_p: float, uniform: torch.Tensor):
    """Sample one token per row by inverting its CDF at ``uniform`` (one draw in [0, 1) per row); return
    the tokens, their log-probabilities under the (truncated, renormalised) distribution sampled from,
    and the kept mask [rows, V] (None when top_p is 1). Temperature 0 is greedy: all the mass on each row's
    most likely token."""
    if temperature == 0:
        greedy = logits.argmax(-1, keepdim=True)
        logits = torch.full(logits.shape, float("-inf"), device=logits.device).scatter_(-1, greedy, 0.0)
    else:
        # The exact temperature, as the trainer divides by it when it scores the same tokens.
        logits = logits.float() / temperature
    keep = None
    if top_p < 1.0:
        keep = top_p_keep(logits, top_p)
        logits = logits.masked_fill(~keep, float("-inf"))
    logprobs = logits.log_softmax(-1)
    probs = logprobs.exp()
    cdf = probs.cumsum(-1)
    tokens = torch.searchsorted(cdf, (uniform.to(cdf) * cdf[:, -1]).unsqueeze(-1), right=True).squeeze(-1)
    # u·total can round up to total itself: fall back to the last token with any mass.
    last_kept = probs.shape[-1] - 1 - (probs.flip(-1) > 0).float().argmax(-1)
    tokens = torch.minimum(tokens, last_kept)
    return tokens, logprobs.gather(-1, tokens[:, None]).squeeze(-1), keep


def row_uniforms(seed: int, first_row: int, rows: int, steps: int) -> torch.Tensor:
    """[rows, steps] uniforms; row r is the stream of row ``first_row + r`` of the batch (batch-invariant)."""
    out = torch.empty(rows, steps)
    for r in range(rows):
        out[r] = torch.rand(steps, generator=torch.Generator().manual_seed(row_seed(seed, first_row + r)))
    return out


DTYPE_NAMES = {dtype: name for name, dtype in TORCH_DTYPES.items()}


class KVCacheSampler:
    """Batched sampling with an incremental KV cache on a private copy of the policy.

    With ``fp32_head`` the output projection and the logits are computed in fp32 from the head's weight in
    the sampler dtype (:mod:`~precision_oat.precision.lm_head`).
    """

    def __init__(self, model: torch.nn.Module, dtype: torch.dtype, device: torch.device | str = "cpu", pad_token_id: int = 0,
                 fp32_head: bool = False):
        self.model = copy.deepcopy(model).to(device=device, dtype=dtype).eval()
        if fp32_head:
            use_fp32_head(self.model)
        for p in self.model.parameters():
            p.requires_grad_(False)
        self.dtype = dtype
        self.device = torch.device(device)
        self.pad_token_id = pad_token_id
        # A tied head answers to its checkpoint name too (lm_head.weight), as a state_dict pushes it.
        self._params = dict(self.model.named_parameters(remove_duplicate=False))
        self.decoder = Decoder(self.model, fp32_head) if supports(self.model.config) else None

    def _next_logits(self, step_ids, attention, cache):
        positions = (attention.cumsum(-1) - 1).clamp(min=0)[:, -step_ids.shape[1] :]
        if self.decoder is not None:
            return self.decoder.forward(step_ids, positions, attention, cache)
        out = self.model(input_ids=step_ids, attention_mask=attention, position_ids=positions, past_key_values=cache,
                         use_cache=True, logits_to_keep=1)
        return out.logits[:, -1], out.past_key_values

    @torch.no_grad()
    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
        for name, tensor in weights:
            if name not in self._params:
                raise KeyError(f"sampler has no parameter {name!r}")
            # Cast to the sampler dtype (the head too: an fp32 head upcasts its weight per call).
            self._params[name].copy_(tensor.to(device=self.device, dtype=self._params[name].dtype))

    def sleep(self) -> None:
        """Nothing to free: the decoder's weights are its own and its KV cache lives per call."""

    def weights_for_check(self) -> dict[str, torch.Tensor]:
        """Every weight the sampler generates with, by HF name (checked against the masters after a sync)."""
        return self._params

    @torch.no_grad()
    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Completion]:
        rows = [p for p in prompts for _ in range(params.n)]
        seed = params.seed if params.seed is not None else torch.seed() % 2**62
        uniforms = row_uniforms(seed, params.first_prompt * params.n, len(rows), params.max_new_tokens).to(self.device)
        width = max(len(p) for p in rows)
        # Left padding keeps every row's next token at the same column.
        input_ids = torch.tensor([[self.pad_token_id] * (width - len(p)) + p for p in rows], device=self.device)
        attention = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in rows], device=self.device)
        stop = torch.tensor(list(params.stop_token_ids) or [-1], device=self.device)

        done = torch.zeros(len(rows), dtype=torch.bool, device=self.device)
        tokens, logps, kept = [], [], []
        cache, step_ids = None, input_ids
        for t in range(params.max_new_tokens):
            logits, cache = self._next_logits(step_ids, attention, cache)
            if not torch.isfinite(logits).all():
                raise PrecisionError(
                    f"the sampler's forward in {DTYPE_NAMES[self.dtype]} gave inf/nan logits at response "
                    f"token {t + 1}: its activations overflow that dtype; check the policy with "
                    "`python -m precision_oat.lab.preflight`, or sample in a wider dtype (--sampler-dtype bf16/fp32)"
                )
            token, logp, keep = sample_next(logits, params.temperature, params.top_p, uniforms[:, t])
            if params.kept_sets and keep is not None:
                kept.append((keep.sum(-1).tolist(), keep.nonzero()[:, 1].tolist()))
            token = token.masked_fill(done, self.pad_token_id)
            tokens.append(token)
            logps.append(logp)
            was_done = done
            done = done | torch.isin(token, stop)
            attention = torch.cat([attention, (~was_done).long()[:, None]], dim=-1)
            step_ids = token[:, None]
            if done.all():
                break

        tokens_t = torch.stack(tokens, 1).tolist()
        logps_t = torch.stack(logps, 1).tolist()
        kept_t = _kept_per_row(kept, len(rows)) if kept else [None] * len(rows)
        stops = set(params.stop_token_ids)
        completions = []
        for prompt, toks, lps, ks in zip(rows, tokens_t, logps_t, kept_t):
            end = next((i + 1 for i, t in enumerate(toks) if t in stops), None)
            cut = end or len(toks)
            completions.append(Completion(prompt, toks[:cut], lps[:cut], end is not None,
                                          ks[:cut] if ks is not None else None))
        return completions


def _kept_per_row(steps: list[tuple[list[int], list[int]]], num_rows: int) -> list[list[list[int]]]:
    """Per-step (kept count of each row, kept ids of all rows in row order) → per row, per step, its kept ids."""
    rows: list[list[list[int]]] = [[] for _ in range(num_rows)]
    for counts, ids in steps:
        start = 0
        for row, count in zip(rows, counts):
            row.append(ids[start : start + count])
            start += count
    return rows
