"""Shared fixtures: tiny models built offline, and the embedded warmed-up policy."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[1]
# The embedded policy is cached here across test sessions (and shared with `make run`).
os.environ.setdefault("PRECISION_OAT_CACHE", os.path.expanduser("~/.cache/precision-oat"))
torch.set_num_threads(min(2, torch.get_num_threads()))


@pytest.fixture(scope="session")
def embedded_policy_dir():
    """The warmed-up tiny arithmetic policy (trained once, then read from the cache)."""
    from precision_oat.tasks.arithmetic import embedded_policy

    return embedded_policy(log=lambda *_: None)


def tiny_model(kind: str = "qwen2", seed: int = 0, hidden: int = 64, vocab: int = 32, layers: int = 2):
    """A random Llama-family model small enough to run dozens of times per test."""
    from transformers import AutoModelForCausalLM, LlamaConfig, Qwen2Config

    torch.manual_seed(seed)
    cls = {"qwen2": Qwen2Config, "llama": LlamaConfig}[kind]
    config = cls(
        vocab_size=vocab, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128, tie_word_embeddings=kind == "qwen2",
    )
    return AutoModelForCausalLM.from_config(config).float().eval()


def byte_tokenizer():
    """A byte-level HF tokenizer with no merges: any text, 256 + 2 ids, built offline."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    vocab = {"<pad>": 0, "<eos>": 1, **{ch: i + 2 for i, ch in enumerate(sorted(alphabet))}}
    core = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    return PreTrainedTokenizerFast(tokenizer_object=core, pad_token="<pad>", eos_token="<eos>")


def save_byte_model(folder, config_class, **config):
    """A random model of ``config_class(**config)`` (seed 0) with the byte tokenizer, saved as an HF folder."""
    from transformers import AutoModelForCausalLM

    tokenizer = byte_tokenizer()
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config_class(vocab_size=len(tokenizer), pad_token_id=0, eos_token_id=1, **config))
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="session")
def byte_model_dir(tmp_path_factory):
    """A random tiny Qwen2 with a byte tokenizer, saved as an HF folder (reads any prompt)."""
    from transformers import Qwen2Config

    return save_byte_model(tmp_path_factory.mktemp("byte-model"), Qwen2Config, hidden_size=32, intermediate_size=64,
                           num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
                           max_position_embeddings=4096)


def load_script(relative: str):
    """A script of the repository (``benchmarks/…``, ``experiments/…``) imported as a module named after its file."""
    path = REPO / relative
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module
