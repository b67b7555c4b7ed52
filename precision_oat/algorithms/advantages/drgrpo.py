"""Dr.GRPO advantage: group-centred reward, no division by the group std.

    A_i = r_i − mean_j r_j

Dividing by the std up-weights prompts that are almost always (or never) solved; Dr.GRPO
drops it. Liu et al. 2025, "Understanding R1-Zero-Like Training" (arXiv 2503.20783), §3.2.
Pair with the ``constant`` reduction for the paper's full recipe.
"""

import torch

from ..policy_loss import AlgorithmSpec
from ..registry import register
from ._group import as_groups


@register("advantage", "drgrpo", reads=())
class DrGRPOMixin:
    """Advantage r − mean_g within each prompt's group."""

    algo: AlgorithmSpec

    def compute_advantages(self, rewards: torch.Tensor) -> torch.Tensor:
        rewards = as_groups(rewards, "--advantage drgrpo")
        return rewards - rewards.mean(dim=1, keepdim=True)
