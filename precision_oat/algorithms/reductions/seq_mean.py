"""Mean over sequences of the per-sequence token mean (original GRPO).

    L = 1/N_seq · Σ_b ( Σ_t m_bt ℓ_bt / Σ_t m_bt )

Each sequence weighs the same whatever its length, which biases towards long wrong answers
(the length bias Dr.GRPO removes). Shao et al. 2024 (arXiv 2402.03300), eq. 3.
"""

import torch

from ..policy_loss import PolicyBatch
from ..registry import register


@register("reduction", "seq-mean", reads=())
class SeqMeanMixin:
    """Σ_b (Σ_t m ℓ / Σ_t m) / num_sequences."""

    def reduce(self, per_token_loss: torch.Tensor, batch: PolicyBatch) -> torch.Tensor:
        lengths = batch.mask.sum(-1).clamp(min=1.0)
        per_sequence = (per_token_loss * batch.mask).sum(-1) / lengths
        return per_sequence.sum() / batch.num_sequences
