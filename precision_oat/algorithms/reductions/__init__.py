"""Reductions: ``reduce(per_token_loss, batch) -> scalar``.

Each divides by the denominators of the whole optimiser batch (``batch.num_sequences``,
``batch.num_tokens``), so the losses of its micro-batches add up to the full-batch loss.
"""

from .constant import ConstantNormMixin
from .seq_mean import SeqMeanMixin
from .token_mean import TokenMeanMixin

__all__ = ["ConstantNormMixin", "SeqMeanMixin", "TokenMeanMixin"]
