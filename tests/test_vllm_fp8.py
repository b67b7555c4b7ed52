"""Which of vLLM's layers hold FP8 weights, and the check that they hold the quantization of what was pushed.

vLLM's quantizer runs on CUDA only; here the check runs with a per-tensor quantizer written out in torch
(scale = max |w| / 448, codes = w / scale in e4m3), which is the arithmetic vLLM's kernel does.
"""

from __future__ import annotations

import pytest
import torch

from precision_oat.precision.weight_sync import WeightSyncError
from precision_oat.samplers.vllm_fp8 import check_fp8_layers, fp8_layers, fp8_method

FP8 = torch.float8_e4m3fn
PACKED = {"qkv_proj": ["q_proj", "k_proj", "v_proj"], "gate_up_proj": ["gate_proj", "up_proj"]}


def per_tensor(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    scale = weight.float().abs().max() / torch.finfo(FP8).max
    return (weight.float() / scale).to(FP8), scale.reshape(1)


def test_the_fp8_layers_are_the_engines_fp8_weights_with_the_checkpoint_weights_they_fuse():
    params = {"model.layers.0.self_attn.qkv_proj.weight": FP8, "model.layers.0.self_attn.qkv_proj.weight_scale":
              torch.float32, "model.layers.0.self_attn.o_proj.weight": FP8, "model.layers.0.mlp.gate_up_proj.weight": FP8,
              "model.layers.0.input_layernorm.weight": torch.bfloat16, "model.embed_tokens.weight": torch.bfloat16}
    assert fp8_layers(params, PACKED) == {
        "model.layers.0.self_attn.qkv_proj": [f"model.layers.0.self_attn.{p}.weight" for p in PACKED["qkv_proj"]],
        "model.layers.0.self_attn.o_proj": ["model.layers.0.self_attn.o_proj.weight"],
        "model.layers.0.mlp.gate_up_proj": ["model.layers.0.mlp.gate_proj.weight", "model.layers.0.mlp.up_proj.weight"],
    }


def test_vllm_names_online_per_tensor_fp8_by_its_version():
    assert fp8_method(["awq", "fp8", "fp8_per_tensor", "fp8_per_block"]) == "fp8_per_tensor"
    assert fp8_method(["awq", "fp8"]) == "fp8"


def _engine_holding(pushed: dict[str, torch.Tensor], module: str, names: list[str]) -> dict[str, torch.Tensor]:
    codes, scale = per_tensor(torch.cat([pushed[n] for n in names]))
    return {f"{module}.weight": codes.t(), f"{module}.weight_scale": scale}  # transposed, as vLLM keeps them


def test_an_engine_holding_the_quantized_push_passes_and_a_stale_layer_stops_the_sync():
    torch.manual_seed(0)
    module = "model.layers.0.self_attn.qkv_proj"
    names = [f"model.layers.0.self_attn.{p}.weight" for p in ("q_proj", "k_proj", "v_proj")]
    pushed = {n: torch.randn(rows, 16, dtype=torch.bfloat16) for n, rows in zip(names, (16, 8, 8))}
    layers = {module: names, "model.layers.0.self_attn.o_proj": ["model.layers.0.self_attn.o_proj.weight"]}
    held = _engine_holding(pushed, module, names)
    # o_proj was not pushed in this turn, so only the fused q/k/v layer is compared.
    assert check_fp8_layers(held, pushed, layers, quantize=per_tensor) == 1

    newer = {n: w * 2 for n, w in pushed.items()}  # exact in bf16: every code the same, the scale 2x
    with pytest.raises(WeightSyncError, match="qkv_proj .*scale differ"):
        check_fp8_layers(held, newer, layers, quantize=per_tensor)
    shuffled = dict(zip(names, [pushed[names[0]], pushed[names[2]], pushed[names[1]]]))
    with pytest.raises(WeightSyncError, match="qkv_proj .*codes differ"):
        check_fp8_layers(_engine_holding(shuffled, module, names), pushed, layers, quantize=per_tensor)


def test_a_square_layer_is_compared_in_the_layout_vllm_holds_it():
    # o_proj of SmolLM2 is 576 × 576: its held codes have the shape of the pushed matrix, transposed or not.
    torch.manual_seed(0)
    module, name = "model.layers.0.self_attn.o_proj", "model.layers.0.self_attn.o_proj.weight"
    pushed = {name: torch.randn(16, 16, dtype=torch.bfloat16)}
    held = _engine_holding(pushed, module, [name])
    host_copy = {k: v.to("cpu", copy=True) for k, v in held.items()}  # as the read-back takes them off the engine
    assert check_fp8_layers(host_copy, pushed, {module: [name]}, quantize=per_tensor) == 1
    with pytest.raises(WeightSyncError, match="o_proj .*codes differ"):
        check_fp8_layers(held, {name: pushed[name].t().contiguous()}, {module: [name]}, quantize=per_tensor)
