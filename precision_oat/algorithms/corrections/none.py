"""No correction: weight 1 on every token (the default of ``PolicyLoss``).

Registered so that ``--correction none`` names a class like every other choice.
"""

import torch

from ..policy_loss import PolicyBatch, Stats
from ..registry import register


@register("correction", "none", reads=())
class NoCorrectionMixin:
    """Weight 1: trust the sampler's tokens as if the trainer had drawn them."""

    def correction(self, batch: PolicyBatch) -> tuple[torch.Tensor, Stats]:
        return torch.ones_like(batch.mask), {}
