"""``--lm-head-dtype fp32``: the final projection and the logits in fp32 while the rest runs in the run's dtype.

The logits are where a half-precision forward rounds hardest relative to what is read from
it: a bf16 logit of 20 carries an error of up to 0.06, which log-softmax passes straight
into log π. :func:`use_fp32_head` makes an HF causal LM upcast the hidden state before its
output projection and return fp32 logits. An untied head's weight is stored in fp32 (the
masters' values exactly); a head tied to the input embedding keeps the embedding's dtype,
since the embedding lookup feeds the rest of the network, and is upcast for the product.
Both sides (the built-in sampler and the trainer) do the same.
"""

from __future__ import annotations

from types import MethodType

import torch
import torch.nn.functional as F


def head_is_tied(model: torch.nn.Module) -> bool:
    """True when the output projection shares its weight with the input embedding."""
    return model.get_output_embeddings().weight is model.get_input_embeddings().weight


def use_fp32_head(model: torch.nn.Module) -> torch.nn.Module:
    """Make ``model`` (already in its compute dtype) compute its output projection in fp32; returns it."""
    head = model.get_output_embeddings()
    if not head_is_tied(model):
        head.float()
    head.forward = MethodType(_fp32_projection, head)
    return model


def _fp32_projection(head: torch.nn.Linear, hidden: torch.Tensor) -> torch.Tensor:
    bias = None if head.bias is None else head.bias.float()
    return F.linear(hidden.float(), head.weight.float(), bias)
