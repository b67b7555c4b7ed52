"""What Oat assumes about CUDA, made to hold on a machine without a GPU.

Oat 0.2.4 calls CUDA unconditionally in a few places that have a natural CPU meaning:

    oat.interface.get_program        (group_rank * gpus) % torch.cuda.device_count()
    LearnerBase._init, PPOLearner.learn, DeepspeedStrategy.save_model
                                     torch.cuda.synchronize()
    DeepspeedStrategy.setup_distributed
                                     torch.cuda.set_device(LOCAL_RANK)
    DeepspeedStrategy.all_reduce / gather / broadcast
                                     tensor.to(torch.cuda.current_device())

On a CPU-only machine :func:`one_device_for_layout` lets ``get_program`` lay out one
actor and one learner on "device 0", and :func:`install_cpu_shims` (called in the learner
process) turns synchronize and set_device into no-ops and makes current_device the CPU.
With a GPU visible both do nothing. No Oat file is changed.
"""

from __future__ import annotations

import contextlib
from typing import Iterator

import torch


@contextlib.contextmanager
def one_device_for_layout() -> Iterator[None]:
    """``torch.cuda.device_count()`` is at least 1 inside the block."""
    if torch.cuda.device_count() > 0:
        yield
        return
    original = torch.cuda.device_count
    torch.cuda.device_count = lambda: 1
    try:
        yield
    finally:
        torch.cuda.device_count = original


def install_cpu_shims() -> None:
    """Make this process's CUDA calls from Oat harmless when there is no CUDA device."""
    if torch.cuda.is_available():
        return
    torch.cuda.synchronize = lambda device=None: None
    torch.cuda.set_device = lambda device: None
    torch.cuda.current_device = lambda: torch.device("cpu")


def learner_device() -> torch.device:
    """The device this learner process computes on."""
    if torch.cuda.is_available():
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")
