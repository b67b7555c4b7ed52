"""The seam every algorithm piece plugs into.

A policy-gradient loss here is four independent choices, each one hook:

    compute_advantages(rewards)  advantage estimator      (advantages/)
    objective(batch)             per-token surrogate loss (objectives/)
    correction(batch)            sampler→trainer weight   (corrections/)
    reduce(loss, batch)          tokens → scalar          (reductions/)

Each piece is a mixin that implements exactly one hook, so a learner is a stack of
classes: ``class MyLearner(SeqMISMixin, ClipMixin, DrGRPOMixin, PrecisionLearner)``.
``policy_loss`` composes them and is the one method both backends call.

Symbols (docs/concepts.md): μ = sampler probability, π_old = trainer probability before
the update, π_θ = trainer probability under the current weights; Δ_t = log π − log μ,
ρ = Σ_t Δ_t over response tokens.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch

Stats = dict[str, float]


class Mean(float):
    """A statistic that is a mean over ``count`` items other than the batch's response tokens (its sequences).

    A statistic is a plain float when it is a mean over the batch's response tokens (a token mean or a token
    share); a mean over anything else is a ``Mean``, which carries how many items it averages. The update
    combines the statistics of its micro-batches and ranks weighted by those counts, so a logged statistic is
    the same however the rows are cut into forward passes (``--micro-batch-size``, ``--micro-batch-tokens``).
    """

    count: float

    def __new__(cls, value: float, count: float) -> "Mean":
        mean = super().__new__(cls, value)
        mean.count = float(count)
        return mean


def sequence_mean(values: torch.Tensor) -> Mean:
    """The mean of one value per sequence, [B], as a :class:`Mean` over B sequences."""
    values = values if values.is_floating_point() else values.float()
    return Mean(values.mean().item() if values.numel() else 0.0, values.numel())


@dataclass(frozen=True)
class AlgorithmSpec:
    """A fully resolved algorithm: which piece fills each hook, and every constant.

    Built from the command line by :func:`precision_oat.algorithms.resolve`; the
    mixins read their constants from ``self.algo``.
    """

    advantage: str
    objective: str
    correction: str
    reduction: str
    # Cap C on the importance weight of the `pg` / `token-is` objectives; None = no cap.
    is_cap: Optional[float] = None
    # PPO/GRPO clip range: ratio clipped to [1 - clip_low, 1 + clip_high].
    clip_low: float = 0.2
    clip_high: float = 0.2
    # Cap C of the sampler→trainer correction (TIS truncates at C, MIS masks above C).
    correction_cap: Optional[float] = None
    # Band [α, β] of the `icepop` correction on π_old/μ per token (IcePop's 0.5 and 5).
    icepop_low: float = 0.5
    icepop_high: float = 5.0
    # Band [lo, hi] of the `geo-mask` correction on exp(mean_t Δ_t) per sequence (SkyRL's 0.99 and 1.01).
    geo_mask_low: float = 0.99
    geo_mask_high: float = 1.01
    # The `divergence-mask` correction: estimator (k1, k2, k3), level (token, seq-sum, seq-mean, seq-max), and the
    # largest value kept (verl's k3 preset: the sequence mean of k3 up to 0.01).
    divergence_measure: str = "k3"
    divergence_level: str = "seq-mean"
    divergence_threshold: float = 0.01
    # Constant normaliser of the `constant` reduction (Dr.GRPO uses the max generation length).
    loss_constant: float = 1.0
    # ε in GRPO's (r - mean) / (std + ε).
    adv_eps: float = 1e-6


@dataclass
class PolicyBatch:
    """Everything a policy loss needs about one micro-batch of B responses (docs/python.md lists the fields).

    Per-token tensors are [B, T], T the micro-batch's longest sequence less one: column t holds the token at
    position t + 1, the one it predicts. ``advantages`` is [B], one per response.
    """

    logprobs: torch.Tensor  # [B, T] log π_θ of each sampled token; carries the gradient
    old_logprobs: torch.Tensor  # [B, T] log π_old, trainer recompute before the update
    sampler_logprobs: torch.Tensor  # [B, T] log μ, as returned by the sampler
    advantages: torch.Tensor  # [B] one per response
    mask: torch.Tensor  # [B, T] 1.0 on response tokens, 0.0 on prompt and padding
    # Denominators of the whole optimiser batch. A learner that splits the batch into
    # micro-batches sets them so that the micro-batch losses add up to the full-batch loss.
    num_sequences: Optional[int] = None
    num_tokens: Optional[float] = None

    def __post_init__(self):
        if self.num_sequences is None:
            self.num_sequences = self.mask.shape[0]
        if self.num_tokens is None:
            self.num_tokens = float(self.mask.sum().clamp(min=1.0))


def masked_sum(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Per-sequence sum over response tokens, shape [B]."""
    return (x * mask).sum(-1)


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean over all response tokens of the batch (a scalar)."""
    return (x * mask).sum() / mask.sum().clamp(min=1.0)


def sequence_log_ratio(logprobs: torch.Tensor, reference: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Σ_t (logprobs − reference) over response tokens, shape [B]."""
    return masked_sum(logprobs - reference, mask)


class PolicyLoss:
    """Composes the four hooks into one loss. Mixins placed before it fill the hooks.

    The defaults here are the neutral choices: no correction and a token mean. An
    advantage estimator and an objective have no neutral choice and must be mixed in.
    """

    algo: AlgorithmSpec

    def compute_advantages(self, rewards: torch.Tensor) -> torch.Tensor:
        """Map rewards [num_prompts, G] to advantages of the same shape."""
        raise NotImplementedError(f"{type(self).__name__} mixes in no advantage estimator")

    def objective(self, batch: PolicyBatch) -> tuple[torch.Tensor, Stats]:
        """Per-token surrogate loss [B, T] (to be minimised) and its statistics."""
        raise NotImplementedError(f"{type(self).__name__} mixes in no objective")

    def correction(self, batch: PolicyBatch) -> tuple[torch.Tensor, Stats]:
        """Detached weight broadcastable to [B, T] that multiplies the objective."""
        return torch.ones_like(batch.mask), {}

    def reduce(self, per_token_loss: torch.Tensor, batch: PolicyBatch) -> torch.Tensor:
        """Token mean over the whole optimiser batch."""
        return (per_token_loss * batch.mask).sum() / batch.num_tokens

    def policy_loss(self, batch: PolicyBatch) -> tuple[torch.Tensor, Stats]:
        """The loss to backpropagate and detached scalar statistics (``loss/…``, ``mismatch/…``)."""
        per_token, stats = self.objective(batch)
        weight, correction_stats = self.correction(batch)
        loss = self.reduce(per_token * weight.detach(), batch)
        return loss, {**stats, **correction_stats}
