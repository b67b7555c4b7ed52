"""PPO / GRPO clipped surrogate (``--objective clip``, alias ``ppo``).

    r_t    = exp(log π_θ,t − log π_old,t)
    loss_t = max(−A·r_t, −A·clip(r_t, 1 − ε_low, 1 + ε_high))

ε_low = ``algo.clip_low``, ε_high = ``algo.clip_high`` (decoupled as in DAPO,
arXiv 2503.14476). Schulman et al. 2017, PPO (arXiv 1707.06347), eq. 7. The ratio is
trainer vs trainer, so it does not see the sampler; pair it with a correction for that.
"""

import torch

from ..policy_loss import AlgorithmSpec, PolicyBatch, Stats, masked_mean
from ..registry import register


@register("objective", "clip", aliases=("ppo",), reads=("clip_low", "clip_high"))
class ClipMixin:
    """Pessimistic max of the unclipped and clipped −A·r_t."""

    algo: AlgorithmSpec

    def objective(self, batch: PolicyBatch) -> tuple[torch.Tensor, Stats]:
        mask = batch.mask
        log_ratio = torch.where(mask > 0, batch.logprobs - batch.old_logprobs, 0.0)
        ratio = log_ratio.exp()
        advantages = batch.advantages[:, None]
        unclipped = -advantages * ratio
        clipped = -advantages * ratio.clamp(1.0 - self.algo.clip_low, 1.0 + self.algo.clip_high)
        per_token = torch.maximum(unclipped, clipped)
        stats = {
            "loss/clip_frac": masked_mean((clipped > unclipped).float(), mask).item(),
            "loss/ratio_mean": masked_mean(ratio.detach(), mask).item(),
        }
        return per_token, stats
