"""Surrogate objectives: ``objective(batch) -> (per_token_loss[B, T], stats)``."""

from .clip import ClipMixin
from .gspo import GSPOMixin
from .pg import ISPGMixin
from .token_is import TokenISPGMixin

__all__ = ["ClipMixin", "GSPOMixin", "ISPGMixin", "TokenISPGMixin"]
