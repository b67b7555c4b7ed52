"""Divergence filter: tokens or whole responses dropped where an estimate of the divergence between π_old and μ
exceeds a threshold (the k1/k2/k3 rejection of verl's rollout correction).

Per token, with Δ_t = log π_old,t − log μ_t (the estimators of KL[μ‖π_old], docs/metrics.md):

    k1_t = −Δ_t            k2_t = ½ Δ_t²            k3_t = exp(Δ_t) − 1 − Δ_t

The level says what is compared with τ = ``algo.divergence_threshold``:

    token     v_t = k_t                 drops the tokens with |v_t| > τ
    seq-sum   v = Σ_t m_t k_t           drops the responses with |v| > τ
    seq-mean  v = Σ_t m_t k_t / Σ_t m_t
    seq-max   v = max_t m_t k_t         (k2 and k3 only)

w = 1 where kept, 0 where dropped: a pure mask. k2 and k3 are ≥ 0, so |·| only matters for k1,
which is signed: |k1| ≤ τ is verl's two-sided k1 bound [1/e^τ, e^τ] on the ratio (its default
lower bound is the reciprocal of the upper), and seq-mean k1 is the geometric-mean test of
``geo-mask`` with the band [e^−τ, e^τ]. The largest k1 says nothing about the size of a
response's gap, so k1 has no seq-max (verl has none either). Defaults: k3, seq-mean, τ = 0.01,
verl's ``decoupled_k3_rs`` preset (``verl/trainer/config/algorithm.py``;
the filters are in ``verl/trainer/ppo/rollout_corr_helper.py``).
"""

import torch

from ..policy_loss import AlgorithmSpec, PolicyBatch, Stats, masked_sum
from ..registry import register
from ._ratio import dropped_shares, token_log_ratio

ESTIMATORS = {
    "k1": lambda delta: -delta,
    "k2": lambda delta: 0.5 * delta.square(),
    "k3": lambda delta: torch.expm1(delta) - delta,
}
LEVELS = {
    "token": lambda k, mask: k,
    "seq-sum": lambda k, mask: masked_sum(k, mask)[:, None],
    "seq-mean": lambda k, mask: (masked_sum(k, mask) / mask.sum(-1).clamp(min=1.0))[:, None],
    # k2 and k3 are ≥ 0 and 0 off the response, so the row's max is the max over its response.
    "seq-max": lambda k, mask: (k * mask).amax(-1, keepdim=True),
}


@register("correction", "divergence-mask", reads=("divergence_measure", "divergence_level", "divergence_threshold"))
class DivergenceMaskMixin:
    """1 where the token's or response's k1/k2/k3 is at most τ, else 0."""

    algo: AlgorithmSpec

    def correction(self, batch: PolicyBatch) -> tuple[torch.Tensor, Stats]:
        a = self.algo
        k = ESTIMATORS[a.divergence_measure](token_log_ratio(batch))
        dropped = LEVELS[a.divergence_level](k, batch.mask).abs() > a.divergence_threshold
        token_share, seq_share = dropped_shares(dropped, batch.mask)
        stats = {"mismatch/divergence_mask_frac": token_share, "mismatch/divergence_mask_seq_frac": seq_share}
        return (~dropped).to(batch.mask.dtype), stats
