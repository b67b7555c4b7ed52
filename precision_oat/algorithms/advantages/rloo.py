"""RLOO advantage: reward minus the mean reward of the *other* samples of the prompt.

    A_i = r_i − 1/(G−1) Σ_{j≠i} r_j  =  G/(G−1) · (r_i − mean_j r_j)

The leave-one-out baseline does not depend on r_i, so the estimate stays unbiased.
Kool et al. 2019 ("Buy 4 REINFORCE samples, get a baseline for free!");
Ahmadian et al. 2024 (arXiv 2402.14740).
"""

import torch

from ..policy_loss import AlgorithmSpec
from ..registry import register
from ._group import as_groups


@register("advantage", "rloo", reads=())
class RLOOMixin:
    """Advantage r_i − mean_{j≠i} r_j within each prompt's group (needs G ≥ 2)."""

    algo: AlgorithmSpec

    def compute_advantages(self, rewards: torch.Tensor) -> torch.Tensor:
        rewards = as_groups(rewards, "--advantage rloo")
        g = rewards.shape[1]
        return g / (g - 1) * (rewards - rewards.mean(dim=1, keepdim=True))
