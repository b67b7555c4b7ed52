"""What the tests of one correction piece share: a loss made of that piece alone, and a batch whose π_θ is π_old
(shifted by a constant where a test moves the policy) with advantages 1."""

import torch

from precision_oat.algorithms import AlgorithmSpec, PolicyBatch, PolicyLoss


def correction_loss(mixin: type, correction: str, **constants) -> PolicyLoss:
    loss = type("L", (mixin, PolicyLoss), {})()
    loss.algo = AlgorithmSpec("drgrpo", "clip", correction, "token-mean", **constants)
    return loss


def correction_batch(old: torch.Tensor, sampler: torch.Tensor, mask: torch.Tensor,
                     logprobs_shift: float = 0.0) -> PolicyBatch:
    logprobs = (old + logprobs_shift).requires_grad_(True)
    return PolicyBatch(logprobs, old.clone(), sampler.clone(), torch.ones(len(old), dtype=old.dtype), mask.clone())
