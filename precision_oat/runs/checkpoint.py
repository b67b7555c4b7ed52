"""Durable checkpoints: ``OUTPUT_DIR/checkpoints/step_N/`` plus a ``latest`` pointer.

A checkpoint holds the policy as an fp32 HF folder (LoRA merged, so
``AutoModelForCausalLM.from_pretrained`` loads it as is), the tokenizer, the learner's own
state (``learner.save_state``: masters, optimiser and loss scaler of the built-in learner,
or DeepSpeed's checkpoint), and ``trainer_state.pt``: the step, every rank's RNG states and
which mismatch alarms are inside an excursion, tensors and plain values only, so it loads with
``torch.load(weights_only=True)``.

Durability: the checkpoint is written to a temporary folder, every file and folder in it is
fsynced, it is renamed into place, then ``latest`` is replaced atomically and the parent
folder fsynced. A run killed at any point leaves the previous checkpoint intact. The run loop
commits (renames) a step's checkpoint only after writing that step's metrics record, so a resume
never starts past the last record: metrics.jsonl has no gap whenever the run was killed. Resuming
walks the checkpoints newest first and takes the first whose files every rank can read,
warning about each one it skips (torn files, a missing learner state, a ``latest`` naming a
missing folder). The ranks decide together, before any of them loads: a rank that fell back
alone would resume at another step, and loading DeepSpeed's shards is collective. After
each save, checkpoints beyond ``--keep-checkpoints`` are deleted, oldest first.

``trainer_state.pt`` also records how many processes wrote the checkpoint: DeepSpeed's
shards load only into as many processes, so a resume with another number is refused.
"""

from __future__ import annotations

import os
import pickle
import random
import re
import shutil
import sys
import zipfile
from pathlib import Path
from typing import NamedTuple, Optional

import numpy as np
import torch

from precision_oat.distributed.world import SINGLE, World
from precision_oat.errors import UserError
from precision_oat.quiet import quiet_save
from precision_oat.runs.folder import RUN_MARKER, holds_run, stopped_before_first_step

STEP_FOLDER = re.compile(r"^step_(\d+)$")
# What a torn, truncated or half-written checkpoint raises while loading.
UNREADABLE = (OSError, EOFError, RuntimeError, KeyError, ValueError, pickle.UnpicklingError, zipfile.BadZipFile)


def write_checkpoint(output_dir: Path, step: int, learner, tokenizer, world: World = SINGLE,
                     alarms: Optional[dict[str, bool]] = None) -> Path:
    """Write checkpoint ``step`` into a hidden folder, every file fsynced; return that folder for
    :func:`commit_checkpoint`. No resume finds it before the commit. ``alarms``: which ``--mismatch-alarm``s are
    inside an excursion (:attr:`~precision_oat.runs.alarms.AlarmWatch.inside`).

    Every rank takes part (gathering the weights and DeepSpeed's shards are collective); rank 0
    writes the rest.
    """
    written = output_dir / "checkpoints" / f".step_{step:06d}.tmp"
    if world.is_main:
        shutil.rmtree(written, ignore_errors=True)
        written.mkdir(parents=True)
    world.barrier()
    policy = export_policy(learner, world)
    learner.save_state(written)
    # Each rank's own: dropout draws from them, and the ranks' rows (so their draws) differ.
    rng = world.gather(rng_states())
    cuda_rng = world.gather(cuda_rng_state())
    world.barrier()
    if world.is_main:
        with quiet_save():
            policy.save_pretrained(written)
            tokenizer.save_pretrained(written)
        torch.save({"step": step, "rng": rng[0], "rank_rng": rng, "cuda_rng": cuda_rng, "world_size": world.size,
                    "alarms": dict(alarms or {})}, written / "trainer_state.pt")
        _fsync_tree(written)
    return written


def commit_checkpoint(written: Path, keep: Optional[int] = None, world: World = SINGLE) -> Path:
    """Rename a written checkpoint into place, point ``latest`` at it, and keep the newest ``keep`` (None: all).

    Rank 0's alone and no collective, so a rank that dies cannot stop it halfway.
    """
    root = written.parent
    final = root / written.name.removeprefix(".").removesuffix(".tmp")
    if world.is_main:
        shutil.rmtree(final, ignore_errors=True)
        written.rename(final)
        point_latest(final)
        prune_checkpoints(root, keep)
    return final


def point_latest(folder: Path) -> None:
    """Make ``latest`` name checkpoint ``folder``, atomically and durably."""
    root = folder.parent
    pointer = root / "latest.tmp"
    pointer.write_text(folder.name)
    _fsync(pointer)
    os.replace(pointer, root / "latest")
    _fsync(root)


def export_policy(learner, world: World = SINGLE):
    """The policy as a plain fp32 HF model on rank 0; None elsewhere.

    Gathering the weights is collective, so the other ranks read the whole export too, one
    tensor at a time, but build no model and keep nothing.
    """
    if world.is_main:
        return learner.export_model()
    for _ in learner.export_weights():
        pass
    return None


def checkpoints_newest_first(output_dir: Path) -> list[Path]:
    """The step folders of ``output_dir``: the one ``latest`` names first, then the others by step, descending."""
    root = output_dir / "checkpoints"
    if not root.is_dir():
        return []
    folders = sorted((p for p in root.iterdir() if STEP_FOLDER.match(p.name) and p.is_dir()),
                     key=step_of, reverse=True)
    named = _latest_named(root)
    if named in folders:
        folders.remove(named)
        folders.insert(0, named)
    return folders


def checkpoint_step(folder: Path) -> int:
    """The number of completed steps in ``folder``'s ``trainer_state.pt`` (raises when it is unreadable)."""
    return int(torch.load(folder / "trainer_state.pt", weights_only=True)["step"])


def latest_checkpoint(output_dir: Path) -> Optional[Path]:
    """The newest checkpoint whose ``trainer_state.pt`` reads, or None."""
    for folder in checkpoints_newest_first(output_dir):
        try:
            checkpoint_step(folder)
        except UNREADABLE:
            continue
        return folder
    return None


def require_checkpoint(output_dir: Path) -> Path:
    """The newest checkpoint for ``--resume``, or a :class:`UserError` saying why there is none."""
    if not holds_run(output_dir):
        raise UserError(f"--resume: {output_dir} holds no precision-oat run ({RUN_MARKER} is missing); "
                        "start the run without --resume, or pass the --output-dir of the run to continue")
    folder = latest_checkpoint(output_dir)
    if folder is None:
        root = output_dir / "checkpoints"
        found = checkpoints_newest_first(output_dir)
        if not found and stopped_before_first_step(output_dir):
            raise UserError(f"--resume: no checkpoint in {root}; start the run without --resume")
        if not found:
            raise UserError(f"--resume: the run in {output_dir} saved no checkpoint before it stopped, so it cannot be "
                            "continued; start it again with --overwrite (which deletes it) or in another --output-dir")
        raise UserError(f"--resume: no checkpoint in {root} has a readable trainer_state.pt ({len(found)} found, "
                        "torn or written by an older version); start a new run with --overwrite or in another --output-dir")
    return folder


class Resumed(NamedTuple):
    """Where a resume starts: the checkpoint, its step, and which alarms were inside an excursion there (none in a
    checkpoint from before they were saved)."""

    folder: Path
    step: int
    alarms: dict[str, bool]


def load_checkpoint(folder: Path, learner, world: World = SINGLE) -> Resumed:
    """Restore the learner and RNG states from ``folder``."""
    state = torch.load(folder / "trainer_state.pt", weights_only=True)
    learner.load_state(folder)
    set_rng_states(state.get("rank_rng", [state["rng"]] * world.size)[world.rank])
    cuda_rng = state.get("cuda_rng", [None] * world.size)[world.rank]
    if cuda_rng is not None:
        torch.cuda.set_rng_state(cuda_rng)
    return Resumed(folder, int(state["step"]), state.get("alarms", {}))


def check_world_size(folder: Path, world: World) -> None:
    """Refuse to resume ``folder`` with another number of processes than the one that wrote it."""
    written_by = torch.load(folder / "trainer_state.pt", weights_only=True).get("world_size")
    if written_by is None or written_by == world.size:
        return
    launch = "without torchrun (one process)" if written_by == 1 else f"with torchrun --nproc-per-node {written_by}"
    raise UserError(f"--resume: {folder.name} was written by {written_by} process{'es' if written_by > 1 else ''} "
                    f"and this run has {world.size}; resume {launch}")


def resume_checkpoint(output_dir: Path, learner, world: World = SINGLE) -> Resumed:
    """Load the newest checkpoint every rank can read; warn in one line about each one skipped."""
    root = output_dir / "checkpoints"
    named = _latest_named(root)
    if named is not None and not named.is_dir() and world.is_main:
        _warn(f"{root / 'latest'} names {named.name}, which is missing; resuming from the newest intact checkpoint")
    for folder in world.broadcast(checkpoints_newest_first(output_dir)):
        problems = [(rank, p) for rank, p in enumerate(world.gather(unreadable(folder, learner))) if p is not None]
        if not problems:
            return load_checkpoint(folder, learner, world)
        if world.is_main:
            where = "" if world.size == 1 else f" on rank {problems[0][0]}"
            _warn(f"checkpoint {folder} is unreadable{where} ({problems[0][1]}); trying the one before it")
    raise UserError(f"--resume: no checkpoint in {root} loads (see the warnings above); start a new run "
                    "with --overwrite or in another --output-dir")


def unreadable(folder: Path, learner) -> Optional[str]:
    """Why this rank cannot load ``folder`` (a missing or torn file), or None when every file it reads is whole."""
    try:
        checkpoint_step(folder)
        for path in learner.state_files(folder):
            _check_archive(path)
    except UNREADABLE as e:
        return _first_line(e)
    return None


def prune_checkpoints(root: Path, keep: Optional[int]) -> None:
    """Delete all but the ``keep`` newest checkpoints up to the one ``latest`` names (never it), and stale temporaries.

    Checkpoints past ``latest`` are those a resume fell back over; the run rewrites their steps.
    """
    for tmp in root.glob(".step_*.tmp"):
        shutil.rmtree(tmp, ignore_errors=True)
    named = _latest_named(root)
    if keep is None or named is None or not named.is_dir():
        return
    folders = checkpoints_newest_first(root.parent)
    older = [f for f in folders[1:] if step_of(f) < step_of(named)]
    for folder in [f for f in folders[1:] if f not in older] + older[keep - 1:]:
        shutil.rmtree(folder, ignore_errors=True)


# --- RNG states in forms torch.load(weights_only=True) accepts ---


def rng_states() -> dict:
    name, keys, pos, has_gauss, cached_gaussian = np.random.get_state()
    version, internal, gauss_next = random.getstate()
    return {
        "torch": torch.get_rng_state(),
        "python": [version, list(internal), gauss_next],
        "numpy": {"name": name, "keys": torch.from_numpy(keys.astype(np.int64)), "pos": int(pos),
                  "has_gauss": int(has_gauss), "cached_gaussian": float(cached_gaussian)},
    }


def cuda_rng_state() -> Optional[torch.Tensor]:
    """This process's CUDA generator (its current device's), or None where CUDA is not in use."""
    return torch.cuda.get_rng_state() if torch.cuda.is_available() and torch.cuda.is_initialized() else None


def set_rng_states(rng: dict) -> None:
    torch.set_rng_state(rng["torch"])
    version, internal, gauss_next = rng["python"]
    random.setstate((version, tuple(internal), gauss_next))
    n = rng["numpy"]
    np.random.set_state((n["name"], n["keys"].numpy().astype(np.uint32), n["pos"], n["has_gauss"], n["cached_gaussian"]))


# --- helpers ---


def step_of(folder: Path) -> int:
    """The step a checkpoint folder (``step_N``) is named after."""
    return int(STEP_FOLDER.match(folder.name).group(1))


def _latest_named(root: Path) -> Optional[Path]:
    pointer = root / "latest"
    try:
        name = pointer.read_text().strip()
    except OSError:
        return None
    return root / name if STEP_FOLDER.match(name) else None


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_tree(folder: Path) -> None:
    """Every file, then every folder (deepest first), so the data is on disk before the rename publishes it."""
    paths = sorted(folder.rglob("*"), key=lambda p: len(p.parts), reverse=True)
    for path in paths:
        if path.is_file():
            _fsync(path)
    for path in [p for p in paths if p.is_dir()] + [folder]:
        _fsync(path)


def _check_archive(path: Path) -> None:
    """Raise when ``path`` (a torch.save zip archive) is missing, torn or fails a CRC, without loading it."""
    with zipfile.ZipFile(path) as archive:
        bad = archive.testzip()
    if bad is not None:
        raise ValueError(f"{path.name}: {bad} fails its checksum")


def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0][:160]}" if text else type(error).__name__


def _warn(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr, flush=True)


def first_checkpoint(start_step: int, steps: int, save_every: Optional[int], save_every_minutes: Optional[float]) -> str:
    """The line a run prints at its start: when its first checkpoint comes (and with it the first point to resume from)."""
    by_steps = min(steps, (start_step // save_every + 1) * save_every) if save_every else steps
    when = f"step {by_steps}" + (" (the last)" if by_steps == steps else "")
    if save_every_minutes:
        when += f" or after {save_every_minutes:g} minutes, if sooner"
    return (f"first checkpoint: at {when}; also on Ctrl-C/SIGTERM (--save-every {save_every}, "
            f"--save-every-minutes {save_every_minutes})")
