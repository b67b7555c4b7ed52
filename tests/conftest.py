"""Shared fixtures: tiny models built offline, and the embedded warmed-up policy."""

from __future__ import annotations

import os

import pytest
import torch

# The embedded policy is cached here across test sessions (and shared with `make run`).
os.environ.setdefault("PRECISION_OAT_CACHE", os.path.expanduser("~/.cache/precision-oat"))
torch.set_num_threads(min(2, torch.get_num_threads()))


@pytest.fixture(scope="session")
def embedded_policy_dir():
    """The warmed-up tiny arithmetic policy (trained once, then read from the cache)."""
    from precision_oat.tasks.arithmetic import embedded_policy

    return embedded_policy(log=lambda *_: None)


def tiny_model(kind: str = "qwen2", seed: int = 0, hidden: int = 64, vocab: int = 32):
    """A random Llama-family model small enough to run dozens of times per test."""
    from transformers import AutoModelForCausalLM, LlamaConfig, Qwen2Config

    torch.manual_seed(seed)
    cls = {"qwen2": Qwen2Config, "llama": LlamaConfig}[kind]
    config = cls(
        vocab_size=vocab, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128, tie_word_embeddings=kind == "qwen2",
    )
    return AutoModelForCausalLM.from_config(config).float().eval()
