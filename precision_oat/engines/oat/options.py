"""Flags that only the Oat backend reads: process layout and DeepSpeed.

A plain dataclass with no Oat import, so the core's ``Args`` can hold it as one more flag
group; :func:`precision_oat.engines.oat.args.to_oat_args` reads it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional


@dataclass
class OatArgs:
    """Oat backend (--backend oat): how actors and learners are laid out, and DeepSpeed."""

    # GPUs shared by actors and learners; None uses every visible GPU (on CPU: one actor, one learner).
    gpus: Optional[int] = None
    # Actors and learners share the same GPUs; None shares them when there is only one device.
    collocate: Optional[bool] = None
    # DeepSpeed ZeRO stage of the learner (0, 1, 2 or 3).
    zero_stage: int = 2
    # MiB of shared memory (Plasma) that carries rollouts from actors to learners.
    shm_size_mb: int = 2000
    # Load the learner's model with flash-attention 2 (needs the flash-attn package).
    flash_attn: bool = False
    # Keep Adam's moments on the CPU (DeepSpeedCPUAdam; compiles an op on first use).
    adam_offload: bool = False
