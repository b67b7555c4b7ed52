"""Mixed precision the DeepSpeed way: compute weights in the trainer dtype, fp32 master copies.

We hold half-precision *parameters* rather than fp32 parameters under autocast. Autocast
keeps norms, softmax and the residual stream in fp32, so a trainer under autocast would
round far less than the DeepSpeed/FSDP trainers the paper studies, whose whole forward
runs in fp16/bf16 (only the optimiser state and master weights are fp32). Holding the
compute weights in the trainer dtype reproduces those trainers' numerics.

Gradients are moved to the fp32 masters after every backward (so accumulation across
micro-batches happens in fp32), unscaled, clipped and stepped there; the updated masters
are then cast back into the compute weights.
"""

from __future__ import annotations

import torch


class MasterWeights:
    def __init__(self, named_params: list[tuple[str, torch.nn.Parameter]], master_dtype: torch.dtype):
        self.names = [n for n, _ in named_params]
        self.compute = [p for _, p in named_params]
        self.separate = any(p.dtype != master_dtype for p in self.compute)
        if self.separate:
            self.master = [torch.nn.Parameter(p.detach().to(master_dtype).clone()) for p in self.compute]
        else:
            self.master = self.compute

    def accumulate_grads(self) -> None:
        """Add the compute weights' gradients into the master gradients (in master precision)."""
        if not self.separate:
            return
        for m, p in zip(self.master, self.compute):
            if p.grad is None:
                continue
            g = p.grad.to(m.dtype)
            m.grad = g if m.grad is None else m.grad.add_(g)
            p.grad = None

    def scale_grads(self, factor: float) -> None:
        for m in self.master:
            if m.grad is not None:
                m.grad.mul_(factor)

    @torch.no_grad()
    def copy_to_compute(self) -> None:
        if self.separate:
            for m, p in zip(self.master, self.compute):
                p.copy_(m)

    def zero_grad(self) -> None:
        for p in self.master + (self.compute if self.separate else []):
            p.grad = None

    def named_master(self):
        return zip(self.names, self.master)
