"""Token-level truncated importance sampling (TIS).

    w_t = min(exp(log π_old,t − log μ_t), C)        C = ``algo.correction_cap`` (2 is typical)

Weights above C are *truncated* to C, so the token still contributes. Yao et al. 2025,
"Your Efficient RL Framework Secretly Brings You Off-Policy RL Training".
"""

import math

import torch

from ..policy_loss import AlgorithmSpec, PolicyBatch, Stats, masked_mean
from ..registry import register
from ._ratio import require_cap, token_log_ratio


@register("correction", "token-tis", reads=("correction_cap",))
class TokenTISMixin:
    """min(π_old/μ, C) per token."""

    algo: AlgorithmSpec
    # It reads algo.correction_cap: resolve() asks for --correction-cap when the recipe sets none.
    needs_cap = True
    # Its weight is π_old/μ: resolve() refuses it beside an objective that weighs by π_θ/μ already.
    weighs_by_sampler = True

    def correction(self, batch: PolicyBatch) -> tuple[torch.Tensor, Stats]:
        log_cap = math.log(require_cap(self.algo, "token-tis"))
        log_ratio = token_log_ratio(batch)
        weight = log_ratio.clamp(max=log_cap).exp()
        stats = {
            "mismatch/is_weight_mean": masked_mean(weight, batch.mask).item(),
            "mismatch/tis_clip_frac": masked_mean((log_ratio > log_cap).float(), batch.mask).item(),
        }
        return weight, stats
