"""Token mean over the whole optimiser batch (the default of ``PolicyLoss``).

    L = Σ_b Σ_t m_bt ℓ_bt / N_tokens

Every response token weighs the same, so long responses dominate. Used by DAPO
(arXiv 2503.14476).
"""

import torch

from ..policy_loss import PolicyBatch
from ..registry import register


@register("reduction", "token-mean", reads=())
class TokenMeanMixin:
    """Σ m ℓ / num_tokens."""

    def reduce(self, per_token_loss: torch.Tensor, batch: PolicyBatch) -> torch.Tensor:
        return (per_token_loss * batch.mask).sum() / batch.num_tokens
