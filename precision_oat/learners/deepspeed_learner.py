"""``--learner deepspeed``: the shared RL step with DeepSpeed doing forward, backward and step.

What DeepSpeed owns here, as in the trainers the paper studies: the compute weights in the
trainer dtype, fp32 master weights inside its optimiser (ZeRO stage ``--zero-stage``), its
own dynamic loss scaler (fp16; configured by :meth:`Precision.deepspeed_config`), gradient
clipping, and the checkpoint of all of that. What stays ours: the update skeleton, the
algorithm, and gradient accumulation (the boundary is set by hand on the last micro-batch of
each mini-batch, so a short last mini-batch steps correctly).

DeepSpeed refuses fp16 on CPU; bf16 and fp32 run there (tests), everything on CUDA.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import torch

from precision_oat.learners.deepspeed_config import engine_config, ensure_process_group, fp32_masters, import_deepspeed
from precision_oat.learners.deepspeed_hooks import DeepSpeedHooks
from precision_oat.learners.learner import Learner
from precision_oat.learners.lora import merged_lora_weights
from precision_oat.learners.weight_decay import decay_groups
from precision_oat.rl.settings import LearnerSettings

# Tag of the DeepSpeed checkpoint inside a checkpoint folder.
STATE_TAG = "deepspeed"


class DeepSpeedLearner(DeepSpeedHooks, Learner):
    def __init__(self, model: torch.nn.Module, settings: LearnerSettings):
        deepspeed = import_deepspeed()
        super().__init__(model, settings)
        precision, train, device = settings.precision, settings.train, settings.device
        ensure_process_group(device)
        optimizer = {"type": "AdamW", "params": {"lr": train.learning_rate, "betas": list(train.adam_betas),
                                                 "weight_decay": train.weight_decay, "torch_adam": True}}
        config = engine_config(precision, device, train.micro_batch_size, train.zero_stage, train.max_grad_norm,
                               optimizer)
        groups = decay_groups(((n, p) for n, p in self.model.named_parameters() if p.requires_grad), train.weight_decay)
        self.engine, *_ = deepspeed.initialize(model=self.model.to(device), model_parameters=groups, config=config)
        self.model = self.engine.module
        self.model.train()
        self.trainable = [(n, p) for n, p in self.model.named_parameters() if p.requires_grad]

    @property
    def deepspeed_engine(self):
        return self.engine

    @property
    def forward_module(self) -> torch.nn.Module:
        return self.engine

    def forward_logprobs(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, truncation=None,
                         response_mask=None) -> torch.Tensor:
        # What DeepSpeedEngine.forward does first, since the scoring runs the model's body and its head in chunks
        # rather than through it: ZeRO-3 counts a micro-step there, and without the count it overwrites the
        # gradient partitions at every backward instead of accumulating them (its step then sees the last pass only).
        clear = getattr(self.engine.optimizer, "clear_backward_seen_flag", None)
        if clear is not None:
            clear()
        return super().forward_logprobs(input_ids, attention_mask, truncation, response_mask)

    # --- the learner hooks of RLStep (the optimiser's are DeepSpeedHooks') ---

    def backward(self, loss: torch.Tensor, last_micro_batch: bool) -> None:
        # DeepSpeed's own pattern for a boundary set by hand (set_gradient_accumulation_boundary's documentation):
        # the boundary before each backward, and one step() after the last, which optimizer_step makes.
        self.engine.set_gradient_accumulation_boundary(last_micro_batch)
        self.engine.backward(loss)

    # --- weights out ---

    @torch.no_grad()
    def export_weights(self) -> Iterator[tuple[str, torch.Tensor]]:
        """(HF name, fp32 master) of every weight training can change, one at a time; LoRA layers merged.

        Every rank must read it to the end: gathering a ZeRO-partitioned master is collective.
        """
        if self.base_weights is None:
            # One gathered fp32 master alive at a time, not the whole model.
            yield from fp32_masters(self.engine, self.trainable)
            return
        # LoRA: the masters are the small adapter matrices, merged into the kept base weights.
        masters = dict(fp32_masters(self.engine, self.trainable))
        yield from merged_lora_weights(self.model, masters, self.base_weights)

    # --- checkpoint state: DeepSpeed's own ---

    def save_state(self, folder: Path) -> None:
        self.engine.save_checkpoint(str(folder), tag=STATE_TAG, save_latest=False)

    def state_files(self, folder: Path) -> list[Path]:
        """The files this rank's :meth:`load_state` reads: the module states and, under ZeRO, its own optimiser shard."""
        # DeepSpeed's own names for them (it has no public way to ask).
        files = [self.engine._get_ckpt_name(str(folder), STATE_TAG)]
        if self.engine.zero_optimization():
            files.append(self.engine._get_zero_ckpt_name(str(folder), STATE_TAG))
        return [Path(f) for f in files]

    def load_state(self, folder: Path) -> None:
        path, _ = self.engine.load_checkpoint(str(folder), tag=STATE_TAG, load_lr_scheduler_states=False)
        if path is None:
            raise FileNotFoundError(f"no DeepSpeed state under {folder / STATE_TAG}")


__all__ = ["DeepSpeedLearner"]
