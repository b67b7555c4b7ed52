"""Policy-gradient losses as stacks of one-hook mixins (see ``base.py``), their registry and recipes.

Imports torch and the standard library only.
"""

from .advantages import DrGRPOMixin, GRPOMixin, ReinforceMixin, RLOOMixin
from .policy_loss import (
    AlgorithmSpec, Mean, PolicyBatch, PolicyLoss, Stats, masked_mean, masked_sum, sequence_log_ratio, sequence_mean,
)
from .corrections import (
    DivergenceMaskMixin, GeoMaskMixin, IcePopMixin, NoCorrectionMixin, SeqMISMixin, SeqTISMixin, TokenMISMixin,
    TokenTISMixin,
)
from .objectives import ClipMixin, GSPOMixin, ISPGMixin, TokenISPGMixin
from .recipes import RECIPES, Recipe, build_policy_loss, compose, resolve
from .reductions import ConstantNormMixin, SeqMeanMixin, TokenMeanMixin
from .registry import ADVANTAGES, CORRECTIONS, OBJECTIVES, REDUCTIONS, register

__all__ = [
    "ADVANTAGES", "CORRECTIONS", "OBJECTIVES", "RECIPES", "REDUCTIONS",
    "AlgorithmSpec", "Mean", "PolicyBatch", "PolicyLoss", "Recipe", "Stats",
    "build_policy_loss", "compose", "masked_mean", "masked_sum", "register", "resolve", "sequence_log_ratio",
    "sequence_mean",
    "DrGRPOMixin", "GRPOMixin", "ReinforceMixin", "RLOOMixin",
    "ClipMixin", "GSPOMixin", "ISPGMixin", "TokenISPGMixin",
    "DivergenceMaskMixin", "GeoMaskMixin", "IcePopMixin", "NoCorrectionMixin", "SeqMISMixin", "SeqTISMixin",
    "TokenMISMixin", "TokenTISMixin",
    "ConstantNormMixin", "SeqMeanMixin", "TokenMeanMixin",
]
