"""The RL update every backend runs: one rollout in, one policy update and its statistics out.

:class:`RLStep` is a :class:`~precision_oat.algorithms.PolicyLoss` (the algorithm is the
mixins placed before it) plus the skeleton of an update. A learner subclasses it and fills
four hooks with what is truly its own: how to run a forward with the gradient, a backward,
an optimiser step, and what its loss scaler reports. One call of :meth:`RLStep.update`:

1. log π_old of every response token, a no-grad forward per micro-batch (:mod:`~precision_oat.rl.scoring`);
2. the precision gap log π_old − log μ (``mismatch/…``);
3. advantages from the rewards of each group of G samples;
4. ``num_epochs`` passes over a seeded shuffle, in mini-batches of ``train_batch_size``
   responses, each a sum of micro-batch losses (``micro_batch_size`` rows, or packed under
   ``micro_batch_tokens``) from ``policy_loss`` with the whole
   mini-batch's denominators (:mod:`~precision_oat.rl.update_plan`), then one optimiser step;
5. the ratio decomposition log(π_θ/μ) = log(π_θ/π_old) + log(π_old/μ) and, on the first
   mini-batch (before any step, where π_θ = π_old in exact arithmetic), the trainer's
   self-gap and the share of tokens the clip or a cap touches there (``phantom/…``): all of
   that is rounding, not learning.

With several processes (:mod:`~precision_oat.distributed.world`) every rank holds the whole
rollout, scores and trains on its share of the rows, and the statistics are combined over
the ranks.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace
from typing import Iterable

import torch

from precision_oat.algorithms import PolicyLoss
from precision_oat.distributed.world import World
from precision_oat.errors import LEARNER_MEMORY_FLAGS, NonFiniteWeights, out_of_memory_explained
from precision_oat.precision.mismatch_metrics import mismatch_breakdown, mismatch_metrics
from precision_oat.rl.microbatch import combine_stats, micro_batches, passes_on_every_rank
from precision_oat.rl.rollout import Rollout
from precision_oat.rl.scoring import score
from precision_oat.rl.settings import LearnerSettings
from precision_oat.rl.update_plan import policy_batch, update_plan
from precision_oat.seeds import SHUFFLE, derive_seed


class RLStep(PolicyLoss):
    """The shared update. Subclasses set ``self.settings`` and implement the four learner hooks."""

    settings: LearnerSettings
    # Whether this process has run an optimiser step (the optimiser makes its state at the first).
    _stepped = False

    # --- learner hooks ---

    def forward_logprobs(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, truncation=None,
                         response_mask=None) -> torch.Tensor:
        """log π_θ of every next token, [B, L-1] in fp32, carrying the gradient; renormalised over the
        sampler's top-p kept sets when given a :class:`~precision_oat.rl.truncation.Truncation`; only
        where ``response_mask`` [B, L-1] is non-zero when given one (0 elsewhere)."""
        raise NotImplementedError

    def backward(self, loss: torch.Tensor, last_micro_batch: bool) -> None:
        """Accumulate the gradient of ``loss`` (already normalised by the mini-batch denominators)."""
        raise NotImplementedError

    def optimizer_step(self) -> tuple[float, bool]:
        """Clip and step on the accumulated gradient; return (gradient norm, whether the step was skipped)."""
        raise NotImplementedError

    def precision_stats(self) -> dict[str, float]:
        """``train/loss_scale``, ``train/skipped_steps`` and ``train/optimizer_steps`` as the learner counts them."""
        raise NotImplementedError

    def trainable_weights(self) -> Iterable[torch.Tensor]:
        """The master weights this process's optimiser updates (its partition, where the optimiser
        partitions them), checked for inf/NaN after every step."""
        raise NotImplementedError

    def set_train(self, mode: bool) -> None:
        """Switch the model between training and evaluation mode (dropout)."""

    # --- the shared update ---

    def score(self, rollout: Rollout) -> torch.Tensor:
        """log π_old of the rollout's response tokens, [B, L-1] (0 elsewhere), in micro-batches, no gradient."""
        world, t = self.settings.world, self.settings.train
        rows = torch.arange(rollout.num_sequences, device=rollout.input_ids.device)[world.rows(rollout.num_sequences)]
        truncation = None if rollout.truncation is None else rollout.truncation.select(rows, rollout.input_ids.shape[1] - 1)
        lengths = rollout.attention_mask.sum(-1).cpu()
        _, padding = passes_on_every_rank(world, torch.arange(rollout.num_sequences), lambda share: micro_batches(
            share, t.micro_batch_size, lengths, t.micro_batch_tokens))
        self.set_train(False)
        try:
            mine = score(self.forward_logprobs, rollout.input_ids[rows], rollout.attention_mask[rows],
                         t.micro_batch_size, truncation, rollout.response_mask[rows], t.micro_batch_tokens, padding)
        finally:
            self.set_train(True)
        return world.gather_rows(mine)

    def update(self, rollout: Rollout, step: int) -> "Update":
        """One RL update on ``rollout`` (already on the trainer's device); return its statistics and π_old.

        Running out of GPU memory is one :class:`~precision_oat.errors.UserError` line naming the flags to lower.
        """
        with out_of_memory_explained("the learner's forward/backward", LEARNER_MEMORY_FLAGS):
            return self._update(rollout, step)

    def _update(self, rollout: Rollout, step: int) -> "Update":
        start = time.perf_counter()
        s = self.settings.train
        world = self.settings.world
        # Without rescoring, each row's π_old is its forward in the update, written in below.
        rescore = s.rescore and not s.bypass_mode
        old_logprobs = self.score(rollout) if rescore else torch.zeros_like(rollout.sampler_logprobs)
        scored = finished(rollout.input_ids.device)
        advantages = self.compute_advantages(rollout.rewards.view(-1, rollout.group_size)).reshape(-1)

        generator = torch.Generator().manual_seed(derive_seed(s.seed, SHUFFLE, step))
        plan = update_plan(rollout.num_sequences, s.train_batch_size, s.micro_batch_size, s.num_epochs, generator, world,
                           rollout.attention_mask.sum(-1).cpu(), s.micro_batch_tokens)
        losses, norms, loss_stats, ratio_stats = [], [], [], []
        skipped = 0
        first = {}
        for k, mini in enumerate(plan):
            total = 0.0
            mini_stats = []
            passes = len(mini.micro_batches) + mini.padding
            for j, micro in enumerate(mini.micro_batches):
                batch = policy_batch(rollout, old_logprobs, advantages, micro, mini, self.forward_logprobs)
                if not rescore:
                    batch.old_logprobs = batch.logprobs.detach()
                    old_logprobs[micro.to(old_logprobs.device), : batch.old_logprobs.shape[1]] = batch.old_logprobs
                if k == 0:
                    first.update(_self_gap(batch, first))
                    if s.self_consistent_old_logprobs:
                        batch.old_logprobs = batch.logprobs.detach()
                loss, loss_s = self.policy_loss(replace(batch, old_logprobs=batch.sampler_logprobs)
                                                if s.bypass_mode else batch)
                # The loss carries the whole mini-batch's denominators; the ranks' gradients are averaged.
                self.backward(loss * world.size, last_micro_batch=j == passes - 1)
                total += loss.item()
                tokens = float(batch.mask.sum())
                mini_stats.append((loss_s, tokens))
                ratio_stats.append((_ratio_decomposition(batch), tokens))
            for j in range(len(mini.micro_batches), passes):
                self._pass_of_no_rows(rollout, mini.index[:1], last_micro_batch=j == passes - 1)
            if k == 0:
                first.update({f"phantom/{key.split('/', 1)[1]}": v
                              for key, v in combine_stats(mini_stats, world).items() if key.endswith("_frac")})
            if not self._stepped:
                release_cached_memory(rollout.input_ids.device)
                self._stepped = True
            norm, was_skipped = self.optimizer_step()
            if not was_skipped:
                check_finite(self.trainable_weights(), step, world)
            loss_stats += mini_stats
            losses.append(total)
            norms.append(norm)
            skipped += was_skipped

        if not rescore:  # every rank wrote its rows of the one mini-batch; each needs all of them
            rows = plan[0].index.to(old_logprobs.device)
            old_logprobs[rows] = world.gather_rows(old_logprobs[rows[world.rows(len(rows))]])
        stats = mismatch_metrics(rollout.sampler_logprobs, old_logprobs, rollout.response_mask)
        stats.update(mismatch_breakdown(rollout.sampler_logprobs, old_logprobs, rollout.response_mask))
        stats.update(combine_stats(loss_stats, world))
        stats.update(combine_stats(ratio_stats, world))
        first.update(world.reduce({k: first[k] for k in ("_gap_sum", "_gap_tokens")}, "sum"))
        first.update(world.reduce({"_gap_max": first["_gap_max"]}, "max"))
        stats.update(_finish_self_gap(first))
        losses = [sum(per_rank) for per_rank in zip(*world.gather(losses))]
        stats.update(
            {
                "loss/policy": sum(losses) / len(losses),
                "train/grad_norm": _finite_mean(norms),
                "train/skipped_this_step": float(skipped),
                "train/advantage_abs_mean": advantages.abs().mean().item(),
                **self.precision_stats(),
                "perf/train_tokens_per_s": float(rollout.attention_mask.sum()) * s.num_epochs
                / max(time.perf_counter() - start, 1e-9),
                "perf/time/score": scored - start,
            }
        )
        stats["perf/time/update"] = finished(rollout.input_ids.device) - scored
        return Update(stats, old_logprobs)

    def _pass_of_no_rows(self, rollout: Rollout, row: torch.Tensor, last_micro_batch: bool) -> None:
        """A forward and backward that change no gradient (one row, its loss times 0): the collectives of a pass,
        for a rank that has fewer passes than another (:func:`~precision_oat.rl.microbatch.passes_on_every_rank`)."""
        part = rollout.select(row.to(rollout.input_ids.device))
        logprobs = self.forward_logprobs(part.input_ids, part.attention_mask, response_mask=part.response_mask)
        self.backward(logprobs.sum() * 0.0, last_micro_batch=last_micro_batch)


@dataclass(frozen=True)
class Update:
    """What one :meth:`RLStep.update` gives back."""

    # Its statistics (``loss/…``, ``mismatch/…``, ``train/…``, ``perf/…``).
    stats: dict[str, float]
    # log π_old of the rollout, [B, L-1] (the mismatch histograms plot it against μ).
    old_logprobs: torch.Tensor


def release_cached_memory(device: torch.device) -> None:
    """Give the CUDA allocator's free blocks back to the device (nothing elsewhere).

    Before the first optimiser step: the optimiser makes its state there (Adam's two moments, twice
    the fp32 masters). Carved out of the segments the activations have just freed, that state would
    pin them for the rest of the run, and a co-located sampler waking after the update would find
    them taken although nothing in them is used.
    """
    if device.type == "cuda":
        torch.cuda.empty_cache()


def finished(device: torch.device) -> float:
    """The clock once ``device`` has run the work queued on it, so that each phase is charged its own time."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter()


def check_finite(weights: Iterable[torch.Tensor], step: int, world: World) -> None:
    """Stop the run if any weight on any process is inf/NaN (one fused reduction per tensor, no copy
    to the host per tensor); every process checks the weights it holds, and all stop together."""
    total = sum(w.detach().float().abs().sum() for w in weights)
    if world.any(not math.isfinite(float(total))):
        raise NonFiniteWeights(
            f"step {step + 1}: the optimiser step made weights inf/NaN (a too-large --learning-rate, or a "
            "diverged run); stopped before checkpointing, so the latest checkpoint is the last good one"
        )


def _self_gap(batch, running: dict) -> dict:
    """Accumulate Σ|log π_θ − log π_old|, its max and the token count over the first mini-batch."""
    gap = ((batch.logprobs.detach() - batch.old_logprobs).abs() * batch.mask)
    return {
        "_gap_sum": running.get("_gap_sum", 0.0) + float(gap.sum()),
        "_gap_tokens": running.get("_gap_tokens", 0.0) + float(batch.mask.sum()),
        "_gap_max": max(running.get("_gap_max", 0.0), float(gap.max()) if gap.numel() else 0.0),
    }


def _finish_self_gap(first: dict) -> dict:
    out = {k: v for k, v in first.items() if not k.startswith("_")}
    out["precision/self_gap_abs_mean"] = first["_gap_sum"] / max(first["_gap_tokens"], 1.0)
    out["precision/self_gap_abs_max"] = first["_gap_max"]
    return out


def _ratio_decomposition(batch) -> dict[str, float]:
    """Mean |·| over response tokens of log(π_θ/μ), log(π_θ/π_old) and log(π_old/μ)."""
    mask = batch.mask
    tokens = float(mask.sum().clamp(min=1.0))
    logprobs = batch.logprobs.detach()
    mean_abs = lambda x: float((x.abs() * mask).sum()) / tokens  # noqa: E731
    return {
        "ratio/total_abs_mean": mean_abs(logprobs - batch.sampler_logprobs),
        "ratio/policy_change_abs_mean": mean_abs(logprobs - batch.old_logprobs),
        "ratio/precision_gap_abs_mean": mean_abs(batch.old_logprobs - batch.sampler_logprobs),
    }


def _finite_mean(values: list[float]) -> float:
    finite = [v for v in values if math.isfinite(v)]
    return sum(finite) / len(finite) if finite else float("nan")

