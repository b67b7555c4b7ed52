"""Splitting an optimiser batch into micro-batches, and averaging their statistics (both learners)."""

from __future__ import annotations

from typing import Iterator

import torch


def chunks(index: torch.Tensor, size: int) -> Iterator[torch.Tensor]:
    """Consecutive slices of ``index`` of at most ``size`` entries."""
    for i in range(0, len(index), size):
        yield index[i : i + size]


def mean_stats(items: list[dict[str, float]]) -> dict[str, float]:
    """Per key, the mean over the dicts that have it."""
    keys = {k for s in items for k in s}
    return {k: sum(s[k] for s in items if k in s) / sum(1 for s in items if k in s) for k in keys}
