"""GRPO advantage: group-normalised reward.

    A_i = (r_i − mean_j r_j) / (std_j r_j + ε)

over the G samples of one prompt; std is the unbiased (n − 1) estimate and
ε = ``algo.adv_eps``. Shao et al. 2024, DeepSeekMath (arXiv 2402.03300), §4.1.2.
"""

import torch

from ..policy_loss import AlgorithmSpec
from ..registry import register
from ._group import as_groups


@register("advantage", "grpo", reads=("adv_eps",))
class GRPOMixin:
    """Advantage (r − mean_g) / (std_g + ε) within each prompt's group."""

    algo: AlgorithmSpec

    def compute_advantages(self, rewards: torch.Tensor) -> torch.Tensor:
        rewards = as_groups(rewards, "--advantage grpo")
        mean = rewards.mean(dim=1, keepdim=True)
        std = rewards.std(dim=1, keepdim=True)
        return (rewards - mean) / (std + self.algo.adv_eps)
