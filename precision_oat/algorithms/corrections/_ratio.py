"""Pieces shared by the corrections: the cap and the π_old/μ log-ratios."""

import torch

from ..policy_loss import AlgorithmSpec, PolicyBatch, masked_sum


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
