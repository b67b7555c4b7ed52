"""The weight sync, checked: after every push the sampler must hold the masters rounded to its dtype.

The precision contract (:meth:`~precision_oat.precision.policy.Precision.contract`) says what the
sampler computes with: the master weights cast to the sampler dtype (``lm_head.weight`` to
fp32 under ``--lm-head-dtype fp32``). A sampler that skipped a tensor, cast to another dtype
or copied into the wrong slot would otherwise go unnoticed: its μ would simply drift from
the trainer's π, and the drift would be read as precision mismatch. :func:`push_weights`
loads the weights, then compares, bit for bit, every tensor the sampler exposes through
``weights_for_check()``: all of them on the built-in sampler; on vLLM a few of the tensors
it pushed into the engine, compared where they are (on the GPU under CUDA; a check of our
cast and bookkeeping, not of vLLM's own reload). A sampler without that method is not checked.
"""

from __future__ import annotations

from typing import Iterable

import torch

from precision_oat.precision.policy import Precision

Weights = Iterable[tuple[str, torch.Tensor]]


class WeightSyncError(RuntimeError):
    """The sampler's weights differ from the masters rounded to the contract's dtype (a bug, not bad input)."""


def push_weights(sampler, weights: Weights, precision: Precision) -> int:
    """``sampler.load_weights(weights)``, then :func:`check_weight_sync`; returns the number of tensors checked.

    ``weights`` is read once (exporting them can gather them across processes).
    """
    weights = list(weights)
    sampler.load_weights(weights)
    return check_weight_sync(sampler, weights, precision)


@torch.no_grad()
def check_weight_sync(sampler, masters: Weights, precision: Precision) -> int:
    """Raise :class:`WeightSyncError` naming the first tensor the sampler holds in the wrong dtype or with other values."""
    held = sampler.weights_for_check() if hasattr(sampler, "weights_for_check") else {}
    checked = 0
    for name, master in masters:
        if name not in held:
            continue
        got, dtype = held[name], precision.sync_dtype(name)
        if got.dtype != dtype:
            raise WeightSyncError(f"weight sync: the sampler holds {name} in {got.dtype}; the precision contract "
                                  f"casts it to {dtype}")
        want = master.detach().to(device=got.device, dtype=dtype)
        if not torch.equal(want, got):
            diff = float((want.float() - got.float()).abs().max())
            raise WeightSyncError(f"weight sync: the sampler's {name} is not the master weights cast to {dtype} "
                                  f"(max |difference| {diff:.3g}); the sampler's load_weights dropped or altered it")
        checked += 1
    return checked
