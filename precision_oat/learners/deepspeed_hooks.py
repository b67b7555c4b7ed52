"""The RL step's optimiser hooks for a learner whose optimiser lives in a DeepSpeed engine.

Shared by the local DeepSpeed learner and Oat's learner, so both report the same thing the same
way: the gradient norm (DeepSpeed's, or ours where plain fp32 ZeRO-0 reports none), whether the
fp16 loss scaler skipped the step, the loss scale (1 unless the trainer computes in fp16), and
the fp32 masters this process steps, for the inf/NaN guard; and, for scoring, how often every rank
calls the output projection when ZeRO-3 gathers its weight, and whether the backward may call it
again. A class using it names its engine (:attr:`deepspeed_engine`) and may route the step through
its owner (:meth:`step_engine`).
"""

from __future__ import annotations

import torch

from precision_oat.learners.deepspeed_config import local_fp32_masters


class DeepSpeedHooks:
    @property
    def deepspeed_engine(self):
        """The ``deepspeed.DeepSpeedEngine`` that holds the optimiser."""
        raise NotImplementedError

    def step_engine(self) -> None:
        """One optimiser step (a counted micro-step between accumulation boundaries)."""
        self.deepspeed_engine.step()

    def head_calls(self, chunks: int) -> int:
        """The most chunks any rank's scoring pass projects, under ZeRO-3 over several ranks: each call of the
        output projection gathers its weight with every rank, and a rank that called it less would leave the
        others waiting. This rank's ``chunks`` otherwise."""
        engine = self.deepspeed_engine
        if engine.zero_optimization_stage() != 3 or engine.dp_world_size == 1:
            return chunks
        most = torch.tensor([chunks], device=engine.device)
        torch.distributed.all_reduce(most, torch.distributed.ReduceOp.MAX, group=engine.data_parallel_group)
        return int(most)

    @property
    def recompute_head(self) -> bool:
        """False for a frozen output projection under ZeRO-3 (LoRA's): a chunk recomputed inside the backward
        finds the frozen weight still a shard there (torch's CheckpointError), so every chunk's logits are kept."""
        engine = self.deepspeed_engine
        head = engine.module.get_output_embeddings()
        return engine.zero_optimization_stage() != 3 or all(p.requires_grad for p in head.parameters())

    def optimizer_step(self) -> tuple[float, bool]:
        engine = self.deepspeed_engine
        own_norm = None
        if engine.optimizer is None or not hasattr(engine.optimizer, "loss_scale"):
            # Plain fp32 ZeRO-0: the gradients sit on the parameters and DeepSpeed reports no norm.
            own_norm = _grad_norm(p for p in engine.module.parameters() if p.requires_grad)
        skipped_before = engine.skipped_steps
        self.step_engine()
        skipped = engine.skipped_steps > skipped_before
        norm = engine.get_global_grad_norm()
        norm = float(norm) if norm is not None else own_norm
        return (float("inf") if skipped else norm), skipped

    def precision_stats(self) -> dict[str, float]:
        engine = self.deepspeed_engine
        scale = getattr(engine.optimizer, "loss_scale", None)
        return {
            "train/loss_scale": float(scale) if scale is not None and self.precision.trainer == "fp16" else 1.0,
            "train/skipped_steps": float(engine.skipped_steps),
            "train/optimizer_steps": float(engine.global_steps - engine.skipped_steps),
        }

    def trainable_weights(self) -> list[torch.Tensor]:
        return local_fp32_masters(self.deepspeed_engine)


def _grad_norm(params) -> float:
    norms = [p.grad.detach().float().norm() for p in params if p.grad is not None]
    return float(torch.stack(norms).norm()) if norms else 0.0
