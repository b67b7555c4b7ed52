"""Geometric sequence mask: a response is dropped whole when its per-token geometric-mean ratio leaves a band.

    g = exp( Σ_t m_t (log π_old,t − log μ_t) / Σ_t m_t )
    w = 1{lo ≤ g ≤ hi}               lo = ``algo.geo_mask_low`` (0.99), hi = ``algo.geo_mask_high`` (1.01)

A pure mask: the responses kept count with weight 1, not g. Unlike exp ρ_old, g does not grow
with the response's length, so one band suits short and long answers alike. The default band
is SkyRL's (``off_policy_correction.sequence_mask_metric = "geometric"``, ``geo_mask_low`` 0.99 /
``geo_mask_high`` 1.01 in skyrl-train's base config); verl calls it geometric rejection sampling
(Liu, Li et al. 2025, "When Speed Kills Stability", part 3).
"""

import math

import torch

from ..policy_loss import AlgorithmSpec, PolicyBatch, Stats, masked_sum
from ..registry import register
from ._ratio import dropped_shares, token_log_ratio


@register("correction", "geo-mask", reads=("geo_mask_low", "geo_mask_high"))
class GeoMaskMixin:
    """1 per sequence whose exp(mean_t log π_old/μ) lies in [lo, hi], else 0."""

    algo: AlgorithmSpec

    def correction(self, batch: PolicyBatch) -> tuple[torch.Tensor, Stats]:
        log_g = masked_sum(token_log_ratio(batch), batch.mask) / batch.mask.sum(-1).clamp(min=1.0)
        kept = (log_g >= math.log(self.algo.geo_mask_low)) & (log_g <= math.log(self.algo.geo_mask_high))
        token_share, seq_share = dropped_shares(~kept[:, None], batch.mask)
        stats = {"mismatch/geo_mask_frac": token_share, "mismatch/geo_mask_seq_frac": seq_share}
        return kept.to(batch.mask.dtype)[:, None], stats
