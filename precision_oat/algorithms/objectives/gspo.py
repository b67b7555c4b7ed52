"""GSPO: the PPO clip applied to one length-normalised ratio per sequence.

    s      = exp( Σ_t m_t (sg(log π_θ,t) − log π_old,t) / Σ_t m_t )
    r_t    = s · exp(log π_θ,t − sg(log π_θ,t))      value s, gradient s·∇log π_θ,t
    loss_t = max(−A·r_t, −A·clip(r_t, 1 − ε_low, 1 + ε_high))

This is the token form ("GSPO-token"); with the ``seq-mean`` reduction its gradient equals
sequence-level GSPO's. The clip range is tiny (3e-4 / 4e-4 in the paper) because s is a
geometric mean. Zheng et al. 2025, "Group Sequence Policy Optimization" (arXiv 2507.18071).
"""

import torch

from ..policy_loss import AlgorithmSpec, PolicyBatch, Stats, masked_sum, sequence_mean
from ..registry import register


@register("objective", "gspo", reads=("clip_low", "clip_high"))
class GSPOMixin:
    """Clipped surrogate on the per-sequence geometric-mean ratio s."""

    algo: AlgorithmSpec

    def objective(self, batch: PolicyBatch) -> tuple[torch.Tensor, Stats]:
        mask = batch.mask
        logprobs = batch.logprobs
        delta = torch.where(mask > 0, logprobs.detach() - batch.old_logprobs, 0.0)
        log_s = masked_sum(delta, mask) / mask.sum(-1).clamp(min=1.0)
        ratio = (log_s[:, None] + torch.where(mask > 0, logprobs - logprobs.detach(), 0.0)).exp()
        low, high = 1.0 - self.algo.clip_low, 1.0 + self.algo.clip_high
        advantages = batch.advantages
        unclipped = -advantages[:, None] * ratio
        clipped = -advantages[:, None] * ratio.clamp(low, high)
        per_token = torch.maximum(unclipped, clipped)
        # Every token of a sequence has the value s, so the clip is decided per sequence.
        s = log_s.exp()
        seq_clipped = -advantages * s.clamp(low, high) > -advantages * s
        stats = {
            "loss/clip_frac": sequence_mean(seq_clipped),
            "loss/seq_ratio_mean": sequence_mean(s),
        }
        return per_token, stats
