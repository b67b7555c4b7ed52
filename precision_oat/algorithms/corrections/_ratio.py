"""Pieces shared by the corrections: the cap, the π_old/μ log-ratios and the shares a mask dropped."""

import torch

from ..policy_loss import AlgorithmSpec, Mean, PolicyBatch, masked_mean, masked_sum, sequence_mean


def require_cap(algo: AlgorithmSpec, name: str) -> float:
    """``algo.correction_cap``, or a ValueError: these corrections have no default cap."""
    if algo.correction_cap is None:
        raise ValueError(f"--correction {name} needs a cap: pass --correction-cap C (e.g. 2 or 10)")
    return float(algo.correction_cap)


def token_log_ratio(batch: PolicyBatch) -> torch.Tensor:
    """log π_old,t − log μ_t on response tokens, 0 elsewhere; detached, [B, T]."""
    diff = batch.old_logprobs.detach() - batch.sampler_logprobs.detach()
    return torch.where(batch.mask > 0, diff, 0.0)


def seq_log_ratio(batch: PolicyBatch) -> torch.Tensor:
    """ρ_old = Σ_t m_t (log π_old,t − log μ_t); detached, [B]."""
    return masked_sum(token_log_ratio(batch), batch.mask)


def dropped_shares(dropped: torch.Tensor, mask: torch.Tensor) -> tuple[float, Mean]:
    """(token share, sequence share) of what a mask dropped: dropped response tokens / response tokens,
    and responses with a dropped token / responses. ``dropped`` is bool, [B, T] or [B, 1] (whole rows)."""
    dropped = dropped.expand_as(mask) & (mask > 0)
    return masked_mean(dropped.float(), mask).item(), sequence_mean(dropped.any(-1))
