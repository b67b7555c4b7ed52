"""Sequence-level truncated importance sampling.

    ρ_old = Σ_t m_t (log π_old,t − log μ_t)
    w     = min(exp ρ_old, C)                  C = ``algo.correction_cap`` (10 in the paper)

One weight per sequence, truncated at C. (The reference scripts call this "seq_mis"; here
truncation and masking are named apart: see ``seq-mis``.)
"""

import math

import torch

from ..policy_loss import AlgorithmSpec, PolicyBatch, Stats, sequence_mean
from ..registry import register
from ._ratio import require_cap, seq_log_ratio


@register("correction", "seq-tis", reads=("correction_cap",))
class SeqTISMixin:
    """min(Π_t π_old/μ, C) per sequence."""

    algo: AlgorithmSpec
    # It reads algo.correction_cap: resolve() asks for --correction-cap when the recipe sets none.
    needs_cap = True
    # Its weight is π_old/μ: resolve() refuses it beside an objective that weighs by π_θ/μ already.
    weighs_by_sampler = True

    def correction(self, batch: PolicyBatch) -> tuple[torch.Tensor, Stats]:
        log_cap = math.log(require_cap(self.algo, "seq-tis"))
        rho = seq_log_ratio(batch)
        weight = rho.clamp(max=log_cap).exp()
        stats = {
            "mismatch/is_weight_mean": sequence_mean(weight),
            "mismatch/tis_clip_frac": sequence_mean(rho > log_cap),
        }
        return weight[:, None], stats
