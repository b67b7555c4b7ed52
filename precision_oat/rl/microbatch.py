"""Splitting an optimiser batch into micro-batches, and averaging their statistics (both learners)."""

from __future__ import annotations

from typing import Iterator, Optional

import torch


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


def mean_stats(items: list[dict[str, float]]) -> dict[str, float]:
    """Per key, the mean over the dicts that have it."""
    keys = {k for s in items for k in s}
    return {k: sum(s[k] for s in items if k in s) / sum(1 for s in items if k in s) for k in keys}
