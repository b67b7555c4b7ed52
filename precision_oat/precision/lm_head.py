"""``--lm-head-dtype fp32``: the final projection and the logits in fp32 while the rest runs in the run's dtype.

The logits are where a half-precision forward rounds hardest relative to what is read from
it: a bf16 logit of 20 carries an error of up to 0.06, which log-softmax passes straight
into log π. :func:`use_fp32_head` makes an HF causal LM upcast the hidden state and the head's
weight for its output projection and return fp32 logits; the weight itself stays in the model's
dtype, as vLLM's fp32 head (``hf_overrides={"head_dtype": "float32"}``) keeps it, so that the
weight sync, DeepSpeed's compute weights and every sampler hold one copy of it in one dtype.
Every side does the same: the built-in sampler, vLLM, and the trainer (built-in or DeepSpeed).
"""

from __future__ import annotations

from types import MethodType

import torch
import torch.nn.functional as F


def use_fp32_head(model: torch.nn.Module) -> torch.nn.Module:
    """Make ``model`` compute its output projection in fp32 from its weight in the model's dtype; returns it."""
    head = model.get_output_embeddings()
    head.forward = MethodType(_fp32_projection, head)
    return model


def _fp32_projection(head: torch.nn.Linear, hidden: torch.Tensor) -> torch.Tensor:
    bias = None if head.bias is None else head.bias.float()
    return F.linear(hidden.float(), head.weight.float(), bias)
