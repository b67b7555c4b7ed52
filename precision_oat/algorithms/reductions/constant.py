"""Dr.GRPO reduction: sum over each sequence's tokens, divided by a constant.

    L = 1/N_seq · Σ_b Σ_t m_bt ℓ_bt / L_const          L_const = ``algo.loss_constant``

With L_const the maximum generation length, the normaliser no longer depends on the
response, removing GRPO's length bias. Liu et al. 2025 (arXiv 2503.20783), §3.2.
"""

import torch

from ..policy_loss import AlgorithmSpec, PolicyBatch
from ..registry import register


@register("reduction", "constant", reads=())
class ConstantNormMixin:
    """Σ_b Σ_t m ℓ / loss_constant / num_sequences."""

    algo: AlgorithmSpec

    def reduce(self, per_token_loss: torch.Tensor, batch: PolicyBatch) -> torch.Tensor:
        total = (per_token_loss * batch.mask).sum()
        return total / self.algo.loss_constant / batch.num_sequences
