"""Sampler→trainer corrections: ``correction(batch) -> (detached weight, stats)``.

All weights compare π_old with μ: the trainer's and the sampler's probability of the same
token under the same weights, so they measure the training–inference mismatch only.
"""

from .divergence_mask import DivergenceMaskMixin
from .geo_mask import GeoMaskMixin
from .icepop import IcePopMixin
from .none import NoCorrectionMixin
from .seq_mis import SeqMISMixin
from .seq_tis import SeqTISMixin
from .token_mis import TokenMISMixin
from .token_tis import TokenTISMixin

__all__ = [
    "DivergenceMaskMixin", "GeoMaskMixin", "IcePopMixin", "NoCorrectionMixin", "SeqMISMixin", "SeqTISMixin",
    "TokenMISMixin", "TokenTISMixin",
]
