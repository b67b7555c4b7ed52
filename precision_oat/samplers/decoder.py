"""An inference-only decoder for Llama-family models (Llama, Qwen2, Mistral, SmolLM2).

The sampler's forward, written the way serving engines write theirs and independent of
the HF modelling code the learner runs: residual add fused with RMSNorm and kept in fp32
before the cast (vLLM's ``fused_add_rms_norm``), SiLU-and-mul computed in fp32, rotary
embedding applied in fp32, attention as explicit fp32 scores against a KV cache stored
in the sampler dtype with the probabilities cast back for the value product (the
FlashAttention convention). Every rounding point differs a little from HF's, exactly as
vLLM's kernels differ from a trainer's: same weights, same math, different arithmetic.
On CPU, where a half-precision GEMM gives the same bits whatever the batch shape, HF's
own KV-cache path reproduces the full forward exactly; this one does not.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

SUPPORTED = {"llama", "qwen2", "mistral"}


def supports(config) -> bool:
    scaling = getattr(config, "rope_scaling", None) or {}
    kind = scaling.get("rope_type", scaling.get("type", "default")) if isinstance(scaling, dict) else "default"
    return config.model_type in SUPPORTED and kind in (None, "default")


def _window(config, layer: int):
    """The sliding window of ``layer``'s attention as HF runs it (a key is seen while query − key position < it),
    or None for the whole causal past: Mistral's ``sliding_window``, Qwen2's above ``max_window_layers`` when
    ``use_sliding_window``, or the ``layer_types`` of newer configs."""
    window = getattr(config, "sliding_window", None)
    if window is None:
        return None
    types = getattr(config, "layer_types", None)
    if types is not None:
        return window if types[layer] == "sliding_attention" else None
    if config.model_type == "qwen2":
        return window if getattr(config, "use_sliding_window", False) and layer >= config.max_window_layers else None
    return window


def _rope_theta(config) -> float:
    if getattr(config, "rope_theta", None) is not None:
        return float(config.rope_theta)
    return float((getattr(config, "rope_parameters", None) or {}).get("rope_theta", 10000.0))


class Decoder:
    """Runs the weights of an HF causal LM (looked up by name, not copied) with a KV cache."""

    def __init__(self, model: torch.nn.Module, fp32_head: bool = False):
        c = model.config
        self.fp32_head = fp32_head
        self.p = dict(model.named_parameters())
        self.layers = c.num_hidden_layers
        self.heads = c.num_attention_heads
        self.kv_heads = getattr(c, "num_key_value_heads", None) or self.heads
        self.head_dim = getattr(c, "head_dim", None) or c.hidden_size // self.heads
        self.eps = c.rms_norm_eps
        self.lm_head = "lm_head.weight" if "lm_head.weight" in self.p else "model.embed_tokens.weight"
        self.windows = [_window(c, i) for i in range(self.layers)]
        half = self.head_dim // 2
        self.inv_freq = 1.0 / (_rope_theta(c) ** (torch.arange(half, dtype=torch.float64) * 2 / self.head_dim))

    def _norm(self, x: torch.Tensor, residual: torch.Tensor | None, name: str):
        """Fused residual add + RMSNorm in fp32; returns (normed in dtype, new residual)."""
        total = x.float() if residual is None else x.float() + residual.float()
        normed = total * torch.rsqrt(total.pow(2).mean(-1, keepdim=True) + self.eps)
        return (normed * self.p[name].float()).to(x.dtype), total.to(x.dtype)

    def _linear(self, x: torch.Tensor, name: str) -> torch.Tensor:
        bias = self.p.get(name + ".bias")
        return F.linear(x, self.p[name + ".weight"], bias)

    def _rotate(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        x1, x2 = x.float().chunk(2, dim=-1)
        return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1).to(x.dtype)

    @torch.no_grad()
    def forward(self, input_ids, positions, key_mask, cache: list | None):
        """Logits of the last position; ``key_mask`` [B, S_total] marks real (non-pad) keys.

        ``cache`` is a list of (K, V) per layer, extended in place; pass None for the prefill.
        """
        b, s = input_ids.shape
        x = F.embedding(input_ids, self.p["model.embed_tokens.weight"])
        angles = positions.to(torch.float64)[..., None] * self.inv_freq.to(positions.device)
        cos, sin = angles.cos().float()[:, None], angles.sin().float()[:, None]
        new_cache = cache if cache is not None else [None] * self.layers
        total = key_mask.shape[1]
        # Query i (at absolute column total - s + i) may see keys up to its own column.
        causal = torch.ones(s, total, dtype=torch.bool, device=x.device).tril(total - s)
        allowed = causal[None, None] & key_mask[:, None, None, :].bool()
        # How far back each query sees its row's keys, in token positions (left padding shifts the columns).
        distance = positions[:, None, :, None] - (key_mask.cumsum(-1) - 1)[:, None, None, :]
        residual = None
        for i in range(self.layers):
            pre = f"model.layers.{i}."
            h, residual = self._norm(x, residual, pre + "input_layernorm.weight")
            q = self._linear(h, pre + "self_attn.q_proj").view(b, s, self.heads, self.head_dim).transpose(1, 2)
            k = self._linear(h, pre + "self_attn.k_proj").view(b, s, self.kv_heads, self.head_dim).transpose(1, 2)
            v = self._linear(h, pre + "self_attn.v_proj").view(b, s, self.kv_heads, self.head_dim).transpose(1, 2)
            q, k = self._rotate(q, cos, sin), self._rotate(k, cos, sin)
            if new_cache[i] is not None:
                k = torch.cat([new_cache[i][0], k], dim=2)
                v = torch.cat([new_cache[i][1], v], dim=2)
            new_cache[i] = (k, v)
            group = self.heads // self.kv_heads
            kk, vv = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
            scores = (q.float() @ kk.float().transpose(-1, -2)) / math.sqrt(self.head_dim)
            seen = allowed if self.windows[i] is None else allowed & (distance < self.windows[i])
            probs = scores.masked_fill(~seen, float("-inf")).softmax(-1).nan_to_num(0.0)
            attn = (probs.to(vv.dtype) @ vv).transpose(1, 2).reshape(b, s, -1)
            x = self._linear(attn, pre + "self_attn.o_proj")
            h, residual = self._norm(x, residual, pre + "post_attention_layernorm.weight")
            gate, up = self._linear(h, pre + "mlp.gate_proj"), self._linear(h, pre + "mlp.up_proj")
            x = self._linear((F.silu(gate.float()) * up.float()).to(h.dtype), pre + "mlp.down_proj")
        h, _ = self._norm(x[:, -1:], residual[:, -1:], "model.norm.weight")
        head = self.p[self.lm_head]
        if self.fp32_head:  # --lm-head-dtype fp32 (precision_oat.precision.lm_head)
            return F.linear(h[:, 0].float(), head.float()), new_cache
        return F.linear(h[:, 0], head), new_cache
