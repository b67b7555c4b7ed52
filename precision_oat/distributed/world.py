"""Data parallelism over N processes (``torchrun --nproc-per-node N``), one device each.

A step of P prompts × G samples is the same step on any N:

- rank r samples prompts [r·P/N, (r+1)·P/N) of the step, whole groups, so advantages never
  mix ranks, and every response draws from the stream of its place in the whole batch
  (``SamplingParams.first_prompt``), so it draws the uniforms one process would draw (the same
  tokens only where the logits agree: on a GPU they depend on the batch shape, docs/scaling.md);
  the T ranks of one tensor-parallel vLLM engine sample the same prompts, the engines split them;
- the ranks exchange their responses, so every rank holds the whole rollout, its rewards,
  advantages and mismatch statistics, exactly as one process computes them;
- each rank scores π_old on its share of the rows, and the scores are exchanged;
- the update follows one process's plan (same shuffle, same mini-batches, same denominators);
  each rank runs its share of every mini-batch and DeepSpeed averages the gradients, so the
  step's gradient is the one-process gradient up to rounding;
- rank 0 alone writes the run folder; a checkpoint holds every rank's DeepSpeed shards.

Collectives run on the process's own device: the process group is the one DeepSpeed or a
launcher set up (NCCL on CUDA, which serves CUDA tensors only; gloo on CPU), so the World
moves what it exchanges to that device rather than counting on a CPU backend being there.

With N = 1 every method here is a no-op, so the single-process path runs the same code.
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence, TypeVar

import torch

from precision_oat.errors import UserError

T = TypeVar("T")


@dataclass(frozen=True)
class World:
    rank: int = 0
    size: int = 1
    local_rank: int = 0
    # Where this process computes, and so where its collectives' tensors must live.
    device: torch.device = torch.device("cpu")

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    # --- the step's batch ---

    def rows(self, n: int, rank: Optional[int] = None) -> slice:
        """This rank's (or ``rank``'s) contiguous share of ``n`` items (n is a multiple of the world size)."""
        per_rank = n // self.size
        rank = self.rank if rank is None else rank
        return slice(rank * per_rank, (rank + 1) * per_rank)

    def share(self, items: Sequence[T], ranks_per_share: int = 1) -> tuple[int, list[T]]:
        """(index of the first item, the items) of this rank's share of ``items``.

        With ``ranks_per_share`` > 1, each run of that many consecutive ranks (the ranks of one tensor-parallel
        vLLM engine) takes the same share.
        """
        per_share = len(items) // (self.size // ranks_per_share)
        first = self.rank // ranks_per_share * per_share
        return first, list(items[first : first + per_share])

    def gather_shares(self, obj: Any, ranks_per_share: int = 1) -> list:
        """Every share's ``obj`` (:meth:`share`), in order, on every rank: one rank's of each run of ranks."""
        return self.gather(obj)[::ranks_per_share]

    # --- collectives (no-ops on one process) ---

    def gather(self, obj: Any) -> list:
        """Every rank's ``obj``, in rank order, on every rank."""
        if self.size == 1:
            return [obj]
        out = [None] * self.size
        torch.distributed.all_gather_object(out, obj)
        return out

    def gather_rows(self, tensor: torch.Tensor) -> torch.Tensor:
        """Every rank's rows of ``tensor`` (same shape on every rank), concatenated in rank order."""
        if self.size == 1:
            return tensor
        mine = tensor.to(self.device).contiguous()
        parts = [torch.empty_like(mine) for _ in range(self.size)]
        torch.distributed.all_gather(parts, mine)
        return torch.cat(parts).to(tensor.device)

    def reduce(self, values: dict[str, float], op: str = "mean") -> dict[str, float]:
        """``values`` combined over ranks: "mean", "sum" or "max" (every rank must pass the same keys)."""
        if self.size == 1 or not values:
            return dict(values)
        keys = sorted(values)
        tensor = torch.tensor([float(values[k]) for k in keys], dtype=torch.float64, device=self.device)
        torch.distributed.all_reduce(tensor, torch.distributed.ReduceOp.MAX if op == "max" else torch.distributed.ReduceOp.SUM)
        if op == "mean":
            tensor /= self.size
        return dict(zip(keys, tensor.tolist()))

    def any(self, flag: bool) -> bool:
        return bool(self.reduce({"flag": float(flag)}, "max")["flag"])

    def broadcast(self, obj: T) -> T:
        """Rank 0's ``obj`` on every rank."""
        if self.size == 1:
            return obj
        box = [obj]
        torch.distributed.broadcast_object_list(box, src=0)
        return box[0]

    def say(self, *values, **print_options) -> None:
        """``print`` on rank 0 alone: a console line every rank reaches, printed once."""
        if self.is_main:
            print(*values, **print_options)

    def on_main(self, run: Callable[[], T]) -> Optional[T]:
        """``run()`` on rank 0 alone (None elsewhere); a :class:`UserError` it raises stops every rank with its line.

        Without it the other ranks, waiting in their next exchange with rank 0, fail there with a traceback.
        """
        if self.size == 1:
            return run()
        result, refused = None, None
        if self.is_main:
            try:
                result = run()
            except UserError as e:
                refused = e
        refused = self.broadcast(refused)
        if refused is not None:
            raise refused
        return result

    def barrier(self) -> None:
        if self.size > 1:
            torch.distributed.barrier()

    def start_together(self, what: str, start: Callable[[], T]) -> T:
        """``start()`` on every rank; if it raised on any rank, every rank still running stops with one line naming
        the rank and the cause (:class:`~precision_oat.errors.UserError`).

        The ranks agree through the process group's store, not through a collective: a start that fails may leave
        the other ranks waiting inside one of its own collectives, which the failed rank never joins. The failed
        rank therefore stops at once, and the launcher (``torchrun``) ends the ranks still waiting there; a rank
        whose start succeeded waits here for the others' word, and stops with the failed rank's line.
        """
        if self.size == 1:
            return start()
        store = torch.distributed.distributed_c10d._get_default_store()
        keys = [f"precision-oat/started/{what}/{rank}" for rank in range(self.size)]
        try:
            result, failure = start(), None
        except Exception as e:
            result, failure = None, e
        cause = ((str(failure).splitlines() or [""])[0] or type(failure).__name__) if failure else ""
        store.set(keys[self.rank], cause or "ok")
        if failure:
            # A start that failed because another rank's did (a collective whose peer left) names that rank: the
            # one that left had said why before it left.
            rank, cause = next(((r, w) for r, w in self._words(store, keys) if w != "ok" and r != self.rank),
                               (self.rank, cause))
            raise UserError(f"{what} failed on rank {rank}: {cause}") from failure
        while not store.check(keys):
            time.sleep(0.05)
        for rank, word in self._words(store, keys):
            if word != "ok":
                raise UserError(f"{what} failed on rank {rank}: {word}")
        return result

    @staticmethod
    def _words(store, keys: list[str]) -> list[tuple[int, str]]:
        """(rank, what it said) of the ranks that have said it."""
        return [(rank, store.get(key).decode()) for rank, key in enumerate(keys) if store.check([key])]


SINGLE = World()


def under_launcher() -> bool:
    """True in a process that torchrun started, however many: its process group must come from the launcher's store.

    torchrun's agent hosts that store and tells its workers (``TORCHELASTIC_USE_AGENT_STORE``) to connect to it as
    clients, for any rendezvous, so a process group of their own making (one at a port of their choosing, as vLLM's
    engine makes one alone) waits for a store that never answers.
    """
    return "TORCHELASTIC_RUN_ID" in os.environ


def world_from_env() -> World:
    """The world a launcher (``torchrun``) describes in the environment; one process otherwise."""
    size = int(os.environ.get("WORLD_SIZE", "1"))
    if size == 1:
        return SINGLE
    return World(int(os.environ["RANK"]), size, int(os.environ.get("LOCAL_RANK", "0")))


def end_process_of_finished_run() -> None:
    """End a process whose run has ended well at once, without the interpreter's teardown, when it holds a gloo group.

    At the interpreter's exit gloo's worker threads can release tensors after the GIL is gone, and the process aborts
    now and then (SIGABRT, "terminate called without an active exception"), so a finished run's launcher reports a
    failure; ``destroy_process_group`` first did not prevent it (DeepSpeed keeps groups of its own). The barrier
    first lets every rank finish its last exchange; the output is flushed, and the process ends with status 0.
    Everything the run wrote is closed by then; NCCL's groups (CUDA) end as before.
    """
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized() and dist.get_backend() == "gloo":
        dist.barrier()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)


def check_layout(world: World, learner: str, prompts_per_step: int, num_samples: int,
                 train_batch_size: Optional[int], eval_sets: dict[str, list]) -> None:
    """Refuse a batch that does not split evenly over the ranks, or a learner that cannot average gradients."""
    if world.size == 1:
        return
    if learner != "deepspeed":
        raise UserError(f"{world.size} processes: data parallelism needs --learner deepspeed "
                        "(DeepSpeed averages the gradients over the ranks)")
    if prompts_per_step % world.size:
        raise UserError(f"--prompts-per-step {prompts_per_step} does not split over {world.size} processes; "
                        f"use a multiple of {world.size}")
    if train_batch_size is not None and train_batch_size % world.size:
        raise UserError(f"--train-batch-size {train_batch_size} does not split over {world.size} processes; "
                        f"use a multiple of {world.size}")
    rollout = prompts_per_step * num_samples
    if train_batch_size is not None and rollout % train_batch_size:
        raise UserError(f"--train-batch-size {train_batch_size} must divide the rollout's {rollout} responses "
                        f"with {world.size} processes (every rank steps together); use a divisor of {rollout} that "
                        f"is a multiple of {world.size}, or leave it unset")
    for name, examples in eval_sets.items():
        if len(examples) % world.size:
            raise UserError(f"evaluation set {name!r} has {len(examples)} questions, not a multiple of "
                            f"{world.size} processes; set --eval-limit to a multiple of {world.size}")


def check_same_config(world: World, config: dict) -> None:
    """Every rank must run the same configuration: name the flags where rank 0 and another differ."""
    if world.size == 1:
        return
    configs = world.gather(json.dumps(config, sort_keys=True, default=str))
    mine = json.loads(configs[0])
    for rank, text in enumerate(configs[1:], start=1):
        other = json.loads(text)
        differ = sorted(k for k in set(mine) | set(other) if mine.get(k) != other.get(k))
        if differ:
            raise UserError(f"rank {rank} was started with other flags than rank 0 ({', '.join(differ)}); "
                            "start every rank with the same command")
