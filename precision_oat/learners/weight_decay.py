"""One weight-decay rule for every learner: biases and norm scales (the 1-D weights) take none."""

from __future__ import annotations

from typing import Iterable

import torch


def decay_groups(named_params: Iterable[tuple[str, torch.Tensor]], weight_decay: float) -> list[dict]:
    """AdamW parameter groups: ``weight_decay`` on matrices, none on biases and norm scales."""
    decay, exempt = [], []
    for _, param in named_params:
        (exempt if param.ndim < 2 else decay).append(param)
    return [group for group in ({"params": decay, "weight_decay": weight_decay},
                                {"params": exempt, "weight_decay": 0.0}) if group["params"]]
