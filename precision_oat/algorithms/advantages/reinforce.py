"""REINFORCE advantage: the raw reward, no baseline.

    A_i = r_i

Williams 1992, "Simple statistical gradient-following algorithms for connectionist
reinforcement learning".
"""

import torch

from ..policy_loss import AlgorithmSpec
from ..registry import register


@register("advantage", "reinforce", reads=())
class ReinforceMixin:
    """Advantage = reward."""

    algo: AlgorithmSpec

    def compute_advantages(self, rewards: torch.Tensor) -> torch.Tensor:
        return rewards.clone() if rewards.is_floating_point() else rewards.float()
