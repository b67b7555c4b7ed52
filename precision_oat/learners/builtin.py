"""The built-in learner: full-sequence scoring in the trainer dtype, fp32 master weights.

``PrecisionLearner`` is a :class:`~precision_oat.learners.learner.Learner`: the update itself (π_old,
mismatch, advantages, mini/micro-batches, statistics) is the shared one, and the algorithm is
whatever mixins sit before it in the MRO (``compose(spec, PrecisionLearner)`` builds that from
``--algo``). What is its own: compute weights in the trainer dtype with fp32 masters
(:mod:`~precision_oat.learners.master_weights`), our loss scaler, AdamW, LoRA merging,
and its checkpoint state.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Iterator

import torch

from precision_oat.learners.learner import Learner
from precision_oat.learners.lora import merged_lora_weights
from precision_oat.learners.master_weights import MasterWeights
from precision_oat.learners.weight_decay import decay_groups
from precision_oat.precision.loss_scaler import LossScaler
from precision_oat.rl.settings import LearnerSettings


class PrecisionLearner(Learner):
    def __init__(self, model: torch.nn.Module, settings: LearnerSettings):
        super().__init__(model, settings)
        precision, train = settings.precision, settings.train
        self.model = self.model.to(device=settings.device, dtype=precision.trainer_dtype)
        self.model.train()
        trainable = [(n, p) for n, p in self.model.named_parameters() if p.requires_grad]
        self.weights = MasterWeights(trainable, precision.master_dtype)
        self.optimizer = torch.optim.AdamW(decay_groups(self.weights.named_master(), train.weight_decay),
                                           lr=train.learning_rate, betas=train.adam_betas)
        self.scaler = LossScaler(precision.loss_scaling)
        self.optimizer_steps = 0

    # --- the learner hooks of RLStep ---

    def backward(self, loss: torch.Tensor, last_micro_batch: bool) -> None:
        (loss * self.scaler.scale).backward()
        self.weights.accumulate_grads()

    def optimizer_step(self) -> tuple[float, bool]:
        """Unscale, check for inf/nan, clip and step; skip the step on overflow."""
        self.weights.scale_grads(1.0 / self.scaler.scale)
        max_norm = self.settings.train.max_grad_norm
        grads = [m for m in self.weights.master if m.grad is not None]
        norm = float(torch.nn.utils.clip_grad_norm_(grads, max_norm if max_norm is not None else math.inf))
        skip = self.scaler.update(overflow=not math.isfinite(norm))
        if not skip:
            self.optimizer.step()
            self.weights.copy_to_compute()
            self.optimizer_steps += 1
        self.weights.zero_grad()
        return norm, skip

    def trainable_weights(self) -> list[torch.Tensor]:
        return self.weights.master

    def precision_stats(self) -> dict[str, float]:
        return {
            "train/loss_scale": self.scaler.scale,
            "train/skipped_steps": float(self.scaler.skipped_steps),
            "train/optimizer_steps": float(self.optimizer_steps),
        }

    # --- weights out ---

    @torch.no_grad()
    def export_weights(self) -> Iterator[tuple[str, torch.Tensor]]:
        """(HF name, master-precision tensor) of every weight that training can change.

        With LoRA these are the merged weights W + (α/r)·B·A of the adapted layers, computed
        from the fp32 masters, so the sampler never sees the adapters' rounding.
        """
        if self.base_weights is None:
            yield from self.weights.named_master()
            return
        yield from merged_lora_weights(self.model, dict(self.weights.named_master()), self.base_weights)

    # --- checkpoint state ---

    def save_state(self, folder: Path) -> None:
        """Masters, optimiser and loss scaler into ``folder/learner_state.pt`` (tensors and plain values only)."""
        torch.save(self.state_dict(), folder / "learner_state.pt")

    def state_files(self, folder: Path) -> list[Path]:
        """The files :meth:`load_state` reads from ``folder``."""
        return [folder / "learner_state.pt"]

    def load_state(self, folder: Path) -> None:
        self.load_state_dict(torch.load(folder / "learner_state.pt", weights_only=True, map_location=self.device))

    def state_dict(self) -> dict:
        return {
            "master": {n: m.detach().cpu() for n, m in self.weights.named_master()},
            "optimizer": self.optimizer.state_dict(),
            "scaler": self.scaler.state_dict(),
            "optimizer_steps": self.optimizer_steps,
        }

    @torch.no_grad()
    def load_state_dict(self, state: dict) -> None:
        for name, m in self.weights.named_master():
            m.copy_(state["master"][name])
        self.weights.copy_to_compute()
        self.optimizer.load_state_dict(state["optimizer"])
        self.scaler.load_state_dict(state["scaler"])
        self.optimizer_steps = state["optimizer_steps"]
