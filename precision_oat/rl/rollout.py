"""Rollouts as padded tensors: what an actor hands a learner.

Sequences are prompt + response, right-padded. Per-token tensors have length L − 1 and
are aligned with the *predicted* token: column t holds quantities of token t + 1.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Optional, Sequence

import torch

from precision_oat.rl.truncation import Truncation
from precision_oat.samplers.sampler import Completion


@dataclass
class Rollout:
    input_ids: torch.Tensor  # [B, L] prompt + response + padding
    attention_mask: torch.Tensor  # [B, L]
    response_mask: torch.Tensor  # [B, L-1] float, 1 where the predicted token is a response token
    sampler_logprobs: torch.Tensor  # [B, L-1] log μ at response positions, 0 elsewhere
    rewards: torch.Tensor  # [B]
    group_size: int  # G: rows [i*G, (i+1)*G) answer the same prompt
    truncation: Optional[Truncation] = None  # the sampler's top-p kept sets, when it sampled with top-p < 1

    @property
    def num_sequences(self) -> int:
        return self.input_ids.shape[0]

    def select(self, index: torch.Tensor) -> "Rollout":
        """Rows ``index``, trimmed to their longest sequence."""
        width = int(self.attention_mask[index].sum(-1).max())
        out = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, torch.Tensor) and value.dim() == 2:
                value = value[index][:, : width if value.shape[1] == self.input_ids.shape[1] else width - 1]
            elif isinstance(value, torch.Tensor):
                value = value[index]
            elif isinstance(value, Truncation):
                value = value.select(index, width - 1)
            out[f.name] = value
        return Rollout(**out)

    def to(self, device) -> "Rollout":
        return Rollout(**{f.name: (v.to(device) if isinstance(v := getattr(self, f.name), (torch.Tensor, Truncation))
                                   else v) for f in fields(self)})


def collate(completions: Sequence[Completion], rewards: Sequence[float], group_size: int, pad_token_id: int) -> Rollout:
    rows = [c.prompt_ids + c.response_ids for c in completions]
    width = max(len(r) for r in rows)
    batch = len(rows)
    input_ids = torch.full((batch, width), pad_token_id, dtype=torch.long)
    attention = torch.zeros((batch, width), dtype=torch.long)
    response = torch.zeros((batch, width - 1))
    sampler_logprobs = torch.zeros((batch, width - 1))
    for i, (c, row) in enumerate(zip(completions, rows)):
        input_ids[i, : len(row)] = torch.tensor(row)
        attention[i, : len(row)] = 1
        start, end = len(c.prompt_ids) - 1, len(row) - 1
        response[i, start:end] = 1.0
        sampler_logprobs[i, start:end] = torch.tensor(c.logprobs, dtype=torch.float32)
    return Rollout(input_ids, attention, response, sampler_logprobs, torch.tensor(rewards, dtype=torch.float32), group_size,
                   Truncation.from_completions(completions, width))
