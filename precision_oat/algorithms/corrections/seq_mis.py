"""Sequence-level masked importance sampling (MIS).

    ρ_old = Σ_t m_t (log π_old,t − log μ_t)
    w     = exp ρ_old · 1{exp ρ_old ≤ C}        C = ``algo.correction_cap`` (10 in the paper)

A sequence whose weight exceeds C is dropped from the update entirely. Liu et al. 2025,
"When Speed Kills Stability: Demystifying RL Collapse from the Training-Inference Mismatch";
the GRPO-MIS baseline of Qi et al. 2025 (arXiv 2510.26788).
"""

import math

import torch

from ..policy_loss import AlgorithmSpec, PolicyBatch, Stats, sequence_mean
from ..registry import register
from ._ratio import require_cap, seq_log_ratio


@register("correction", "seq-mis", reads=("correction_cap",))
class SeqMISMixin:
    """Π_t π_old/μ per sequence, zero where it exceeds C."""

    algo: AlgorithmSpec
    # It reads algo.correction_cap: resolve() asks for --correction-cap when the recipe sets none.
    needs_cap = True
    # Its weight is π_old/μ: resolve() refuses it beside an objective that weighs by π_θ/μ already.
    weighs_by_sampler = True

    def correction(self, batch: PolicyBatch) -> tuple[torch.Tensor, Stats]:
        log_cap = math.log(require_cap(self.algo, "seq-mis"))
        rho = seq_log_ratio(batch)
        masked_out = rho > log_cap
        weight = torch.where(masked_out, 0.0, rho.exp())
        stats = {
            "mismatch/is_weight_mean": sequence_mean(weight),
            "mismatch/mis_mask_frac": sequence_mean(masked_out),
        }
        return weight[:, None], stats
