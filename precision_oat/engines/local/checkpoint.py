"""Atomic checkpoints: ``OUTPUT_DIR/checkpoints/step_N/`` plus a ``latest`` pointer.

A checkpoint holds the policy as an fp32 HF folder (LoRA merged, so
``AutoModelForCausalLM.from_pretrained`` loads it as is), the tokenizer, and
the learner's own state (``learner.save_state``: masters, optimiser and loss scaler of the
built-in learner, or DeepSpeed's checkpoint), and ``trainer_state.pt``: RNG states and the step.
It is written to a temporary folder and renamed, and ``latest`` is replaced atomically,
so a run killed mid-save resumes from the previous complete checkpoint.
"""

from __future__ import annotations

import os
import random
import shutil
from pathlib import Path
from typing import Optional

import numpy as np
import torch

from precision_oat.data_parallel import SINGLE, World


def save_checkpoint(output_dir: Path, step: int, learner, tokenizer, world: World = SINGLE) -> Path:
    """Every rank takes part (gathering the weights and DeepSpeed's shards are collective); rank 0 writes the rest."""
    root = output_dir / "checkpoints"
    final = root / f"step_{step:06d}"
    tmp = root / f".step_{step:06d}.tmp"
    if world.is_main:
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
    world.barrier()
    policy = learner.export_model()
    learner.save_state(tmp)
    world.barrier()
    if world.is_main:
        policy.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        state = {
            "step": step,
            "rng": {"torch": torch.get_rng_state(), "python": random.getstate(), "numpy": np.random.get_state()},
        }
        torch.save(state, tmp / "trainer_state.pt")
        shutil.rmtree(final, ignore_errors=True)
        tmp.rename(final)
        pointer = root / "latest.tmp"
        pointer.write_text(final.name)
        os.replace(pointer, root / "latest")
    world.barrier()
    return final


def latest_checkpoint(output_dir: Path) -> Optional[Path]:
    pointer = output_dir / "checkpoints" / "latest"
    if not pointer.is_file():
        return None
    folder = pointer.parent / pointer.read_text().strip()
    return folder if (folder / "trainer_state.pt").is_file() else None


def load_checkpoint(folder: Path, learner) -> int:
    """Restore the learner and RNG states; return the number of completed steps."""
    state = torch.load(folder / "trainer_state.pt", weights_only=False)
    learner.load_state(folder)
    torch.set_rng_state(state["rng"]["torch"])
    random.setstate(state["rng"]["python"])
    np.random.set_state(state["rng"]["numpy"])
    return state["step"]
