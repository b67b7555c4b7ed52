"""The weight sync, checked: after every push the sampler must hold the masters rounded to its dtype.

The precision contract (:meth:`~precision_oat.precision.policy.Precision.contract`) says what the
sampler computes with: the master weights cast to the sampler dtype (which vLLM then quantizes under
``--sampler-dtype fp8``, and reads back against its own quantizer). A sampler that skipped a tensor, cast to another dtype
or copied into the wrong slot would otherwise go unnoticed: its μ would simply drift from
the trainer's π, and the drift would be read as precision mismatch. :func:`push_weights`
streams the weights into the sampler and compares, bit for bit, every tensor the sampler
exposes through ``weights_for_check()``: all of them on the built-in sampler; on vLLM a few of
the tensors it pushed into the engine, compared where they are (on the GPU under CUDA; a check
of our cast and bookkeeping), while the vLLM sampler itself reads back what its engine holds after
the reload (:meth:`~precision_oat.samplers.vllm_sampler.VLLMSampler.load_weights`). A sampler that
can check none returns an empty dict.

Streaming: the export is read once, one tensor at a time (exporting can gather each weight
across processes, in fp32), and each tensor is checked as soon as the sampler has taken it
and asks for the next, so no more than a tensor or two of the export is alive at once. A
sampler's ``load_weights`` therefore consumes its iterable once, loading each tensor before
it takes the next.
"""

from __future__ import annotations

from typing import Iterable

import torch

from precision_oat.precision.policy import Precision

Weights = Iterable[tuple[str, torch.Tensor]]


class WeightSyncError(RuntimeError):
    """The sampler's weights differ from the masters rounded to the contract's dtype (a bug, not bad input)."""


def push_weights(sampler, weights: Weights, precision: Precision) -> int:
    """``sampler.load_weights(weights)``, each tensor checked once loaded; returns the number of tensors checked."""
    held = sampler.weights_for_check()
    checked = 0

    def checked_after_loading():
        nonlocal checked
        for name, master in weights:
            yield name, master
            # The sampler asks for the next tensor only once it has loaded this one.
            checked += check_weight(name, master, held, precision)

    sampler.load_weights(checked_after_loading())
    return checked


@torch.no_grad()
def check_weight(name: str, master: torch.Tensor, held: dict[str, torch.Tensor], precision: Precision) -> bool:
    """Raise :class:`WeightSyncError` when the sampler holds ``name`` in the wrong dtype or with other values.

    Returns whether ``name`` was checked (the sampler exposes it).
    """
    if name not in held:
        return False
    got, dtype = held[name], precision.sampler_dtype
    if got.dtype != dtype:
        raise WeightSyncError(f"weight sync: the sampler holds {name} in {got.dtype}; the precision contract "
                              f"casts it to {dtype}")
    want = master.detach().to(device=got.device, dtype=dtype)
    if not torch.equal(want, got):
        diff = float((want.float() - got.float()).abs().max())
        raise WeightSyncError(f"weight sync: the sampler's {name} is not the master weights cast to {dtype} "
                              f"(max |difference| {diff:.3g}); the sampler's load_weights dropped or altered it")
    return True
