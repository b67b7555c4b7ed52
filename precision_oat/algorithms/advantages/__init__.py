"""Advantage estimators: ``compute_advantages(rewards[P, G]) -> advantages[P, G]``."""

from .drgrpo import DrGRPOMixin
from .grpo import GRPOMixin
from .reinforce import ReinforceMixin
from .rloo import RLOOMixin

__all__ = ["DrGRPOMixin", "GRPOMixin", "ReinforceMixin", "RLOOMixin"]
