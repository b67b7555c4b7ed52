"""Top-p on the trainer's side: score each sampled token under the sampler's truncated distribution.

With ``--top-p`` < 1 a token is drawn from the renormalised nucleus S_t, and μ is
μ(y_t) / Σ_{v∈S_t} μ(v). A trainer that scores the full softmax reports a smaller
probability for every token, so π_old/μ sits below 1 by the dropped mass: an off-policy
bias that has nothing to do with precision. The trainer must score
π(y_t) / Σ_{v∈S_t} π(v), over the same S_t.

Recomputing top-p on the trainer's own logits would pick a slightly different set
wherever a token sits at the nucleus edge (the trainer's logits are not the sampler's), so
the built-in sampler records the set it kept for every token (``SamplingParams.kept_sets``)
and the trainer renormalises over exactly that set. :class:`Truncation` packs the sets of a
rollout: a count per token and the kept ids one after another, row by row; memory grows
with the number of kept tokens, not with the vocabulary.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

import torch


@dataclass
class Truncation:
    # [B, L-1], aligned like Rollout.sampler_logprobs: tokens kept where column t's token was drawn (0 elsewhere).
    counts: torch.Tensor
    # [counts.sum()] the kept ids, row by row, column by column.
    ids: torch.Tensor

    @classmethod
    def from_completions(cls, completions: Sequence, width: int) -> Optional["Truncation"]:
        """The sets of ``completions`` (rows of width ``width``), or None when they carry none."""
        if not any(c.kept_ids is not None for c in completions):
            return None
        counts = torch.zeros((len(completions), width - 1), dtype=torch.long)
        ids = []
        for i, c in enumerate(completions):
            if c.kept_ids is None or len(c.kept_ids) != len(c.response_ids):
                raise ValueError(f"completion {i}: kept sets for {len(c.kept_ids or [])} of "
                                 f"{len(c.response_ids)} response tokens")
            start = len(c.prompt_ids) - 1
            counts[i, start : start + len(c.kept_ids)] = torch.tensor([len(k) for k in c.kept_ids], dtype=torch.long)
            ids += [t for kept in c.kept_ids for t in kept]
        return cls(counts, torch.tensor(ids, dtype=torch.long))

    def select(self, index: torch.Tensor, columns: int) -> "Truncation":
        """Rows ``index``, cut to ``columns`` columns (those past every selected row's end hold no set)."""
        totals = self.counts.sum(1)
        starts = totals.cumsum(0) - totals
        index = index.to(self.counts.device)
        pieces = [self.ids[s : s + n] for s, n in zip(starts[index].tolist(), totals[index].tolist())]
        return Truncation(self.counts[index][:, :columns], torch.cat(pieces) if pieces else self.ids[:0])

    def to(self, device) -> "Truncation":
        return Truncation(self.counts.to(device), self.ids.to(device))


def kept_set_logprobs(scaled_logits: torch.Tensor, targets: torch.Tensor, counts: torch.Tensor,
                      kept_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """At every row that has a kept set S: (its index, z_y − log Σ_{v∈S} exp z_v, log Σ_{v∈S} exp z_v).

    ``scaled_logits`` [n, V] are the trainer's logits / T in fp32, ``targets`` [n] the sampled
    tokens, ``counts`` [n] the size of each row's set (0: none) and ``kept_ids`` the sets one
    after another. A segment log-sum-exp over the kept ids: no [n, V] mask is built.
    """
    positions = counts.nonzero().squeeze(-1)
    segment = torch.repeat_interleave(torch.arange(len(positions), device=scaled_logits.device), counts[positions])
    picked = scaled_logits[positions[segment], kept_ids]
    peak = torch.full((len(positions),), float("-inf"), device=scaled_logits.device)
    peak = peak.scatter_reduce(0, segment, picked, "amax")
    log_mass = torch.zeros_like(peak).index_add(0, segment, (picked - peak[segment]).exp()).log()
    chosen = scaled_logits[positions, targets[positions]]
    return positions, chosen - peak - log_mass, peak + log_mass
