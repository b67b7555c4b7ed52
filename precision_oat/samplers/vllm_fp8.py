"""``--sampler-dtype fp8``: which of vLLM's layers hold FP8 weights, and the check that they hold ours.

vLLM's online FP8 (``quantization="fp8_per_tensor"``, ``"fp8"`` before that name existed) loads each
linear layer's weight in the model dtype and quantizes it once the layer is loaded: one fp32 scale
per weight matrix (max |w| / 448) and e4m3 codes, stored transposed for its kernels; a fused layer
(q/k/v, gate/up) is one matrix with one scale. Every push goes through vLLM's in-place reload,
which re-runs that quantization layer by layer, so the sampler ends up holding exactly what vLLM's
quantizer makes of the pushed weights. :func:`check_fp8_layers` checks that after a push, by running
vLLM's own quantizer on the pushed weights and comparing codes and scales bit for bit.
"""

from __future__ import annotations

from typing import Callable

import torch

from precision_oat.precision.weight_sync import WeightSyncError

Quantizer = Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]]


def fp8_method(vllm_methods: list[str]) -> str:
    """vLLM's name for online per-tensor FP8 among the quantization methods it knows."""
    return "fp8_per_tensor" if "fp8_per_tensor" in vllm_methods else "fp8"


def fp8_layers(params: dict[str, torch.dtype], packed: dict[str, list[str]]) -> dict[str, list[str]]:
    """The engine's FP8 linear layers (module name → the checkpoint weights it fuses, in vLLM's order).

    ``params``: the engine's parameter names and dtypes; ``packed``: the model's ``packed_modules_mapping``
    (``qkv_proj`` → q/k/v_proj, …).
    """
    layers = {}
    for name, dtype in params.items():
        if dtype != torch.float8_e4m3fn or not name.endswith(".weight"):
            continue
        module = name.removesuffix(".weight")
        parent, _, leaf = module.rpartition(".")
        layers[module] = [f"{parent}.{shard}.weight" for shard in packed[leaf]] if leaf in packed else [name]
    return layers


def vllm_quantizer(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """vLLM's own per-tensor FP8 quantization (the kernel its online loading runs): (codes, scale)."""
    from vllm import _custom_ops as ops

    return ops.scaled_fp8_quant(weight, scale=None)


def check_fp8_layers(held: dict[str, torch.Tensor], pushed: dict[str, torch.Tensor], layers: dict[str, list[str]],
                     quantize: Quantizer = vllm_quantizer) -> int:
    """Raise :class:`~precision_oat.precision.weight_sync.WeightSyncError` unless every layer of ``layers`` whose
    weights were all pushed holds ``quantize`` of them (fused in order); returns how many layers were compared.

    ``held``: the engine's tensors (``<module>.weight`` codes, ``<module>.weight_scale``); ``pushed``: the
    tensors pushed, by checkpoint name, in the sampler dtype.
    """
    compared = 0
    for module, names in layers.items():
        if not all(n in pushed for n in names):
            continue
        codes, scale = quantize(torch.cat([pushed[n] for n in names]))
        got, got_scale = held[f"{module}.weight"], held[f"{module}.weight_scale"]
        codes = codes.to(got.device)
        if _transposed_view(got):
            codes = codes.t()
        same_codes = got.shape == codes.shape and torch.equal(got.float(), codes.float())
        if not same_codes or not torch.equal(got_scale.float().flatten(), scale.to(got_scale.device).float().flatten()):
            raise WeightSyncError(f"weight sync: vLLM's FP8 layer {module} does not hold the quantization of the "
                                  f"weights pushed into it ({'scale' if same_codes else 'codes'} differ): the reload "
                                  "skipped or altered its re-quantization")
        compared += 1
    return compared


def _transposed_view(held: torch.Tensor) -> bool:
    """Whether vLLM holds a layer's codes as the transpose of the (out, in) matrix, as its FP8 kernels take them.

    vLLM keeps them as a transposed view (strides (1, out)), which host copies keep; the layout, not the shape, says
    so, since a square layer (o_proj where heads × head size = hidden size) has the same shape either way.
    """
    return held.dim() == 2 and not held.is_contiguous() and held.t().is_contiguous()
