"""Splitting an optimiser batch into micro-batches, and combining their statistics (both learners)."""

from __future__ import annotations

from typing import Iterator, Optional

import torch

from precision_oat.algorithms import Mean
from precision_oat.distributed.world import SINGLE, World


def chunks(index: torch.Tensor, size: int) -> Iterator[torch.Tensor]:
    """Consecutive slices of ``index`` of at most ``size`` entries."""
    for i in range(0, len(index), size):
        yield index[i : i + size]


def micro_batches(index: torch.Tensor, size: int, lengths: Optional[torch.Tensor] = None,
                  token_budget: Optional[int] = None) -> Iterator[torch.Tensor]:
    """The rows ``index`` cut into forward/backward passes of at most ``size`` rows.

    With a ``token_budget`` the rows are sorted longest first and packed greedily while the
    padded size of a pass (rows × its longest row, ``lengths[row]`` tokens) stays within the
    budget, so long responses share a pass with few others and short ones with many; a row
    longer than the budget gets a pass of its own. Without one, consecutive slices in the given order.
    """
    if token_budget is None:
        yield from chunks(index, size)
        return
    order = index[torch.argsort(lengths[index], descending=True, stable=True)]
    longest = lengths[order].tolist()
    start = 0
    while start < len(order):
        end = start + 1
        # Sorted longest first: the first row of a pass fixes its padded width.
        while end < len(order) and end - start < size and (end - start + 1) * longest[start] <= token_budget:
            end += 1
        yield order[start:end]
        start = end


def passes_on_every_rank(world: World, rows: torch.Tensor, plan) -> tuple[list[torch.Tensor], int]:
    """This rank's passes over its share of ``rows``, ``plan(share) -> passes``, and how many passes of no rows it
    must add to run as many as the rank with the most.

    Every rank must run the same number of forward (and backward) passes: ZeRO-2/3 reduce the gradients at every
    backward and ZeRO-3 gathers the weights at every forward, collectives that pair up across the ranks. Every rank
    holds every row's length, so each plans every rank's share and none needs to ask the others.
    """
    plans = [list(plan(rows[world.rows(len(rows), rank)])) for rank in range(world.size)]
    mine = plans[world.rank]
    return mine, max(map(len, plans)) - len(mine)


def combine_stats(parts: list[tuple[dict[str, float], float]], world: World = SINGLE) -> dict[str, float]:
    """Per key, the mean of the statistics of every pass on every rank, each weighted by what it averages.

    ``parts`` holds (a pass's statistics, its response tokens). A plain float is a mean over the pass's response
    tokens and weighs as many; a :class:`~precision_oat.algorithms.Mean` weighs its own count (its sequences). So a
    token mean of the step is one, however its rows were cut into passes and shared over ranks. Every rank must
    give the same keys.
    """
    totals: dict[str, float] = {}
    for stats, tokens in parts:
        for key, value in stats.items():
            weight = value.count if isinstance(value, Mean) else tokens
            totals[f"sum/{key}"] = totals.get(f"sum/{key}", 0.0) + (float(value) * weight if weight else 0.0)
            totals[f"count/{key}"] = totals.get(f"count/{key}", 0.0) + weight
    totals = world.reduce(totals, "sum")
    keys = [k.split("/", 1)[1] for k in totals if k.startswith("sum/")]
    return {k: totals[f"sum/{k}"] / totals[f"count/{k}"] if totals[f"count/{k}"] else 0.0 for k in keys}
