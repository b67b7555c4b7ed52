"""Loading the policy: an HF id or folder, a GGUF checkpoint, or the embedded tiny model."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from precision_oat.args import ModelArgs


@dataclass
class Policy:
    model: object  # transformers PreTrainedModel, fp32
    tokenizer: object
    # Folder with config and weights that another engine (vLLM) can load; None when the
    # weights exist only in memory (GGUF, hub ids resolved elsewhere).
    folder: Path | None


def load_policy(args: ModelArgs, log: Callable[[str], None] = print) -> Policy:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if args.model is None:
        from precision_oat.tasks.arithmetic import embedded_policy

        folder = embedded_policy(log)
        source, gguf = str(folder), None
    else:
        source, gguf = args.model, args.gguf_file
        folder = Path(source) if Path(source).is_dir() and gguf is None else None
        _check_exists(source, gguf)
    kwargs = {"gguf_file": gguf} if gguf else {}
    try:
        tokenizer = AutoTokenizer.from_pretrained(args.tokenizer or source, **({} if args.tokenizer else kwargs))
        model = AutoModelForCausalLM.from_pretrained(source, attn_implementation=args.attn_implementation, **kwargs)
    except OSError as e:
        raise ValueError(f"--model {source}: could not load it ({e})") from e
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    if gguf:
        # transformers dequantises GGUF weights on load but still flags the model (and its
        # config, hence every checkpoint saved from it) as quantised, which forbids .float()
        # and .to(dtype); the weights are plain tensors, so drop the flags.
        model.hf_quantizer = None
        model.is_quantized = False
        model.config.__dict__.pop("quantization_config", None)
    return Policy(model.float(), tokenizer, folder)


def _check_exists(source: str, gguf: str | None) -> None:
    path = Path(source)
    looks_local = source.startswith((".", "/", "~")) or path.exists()
    if looks_local and not path.is_dir():
        raise ValueError(f"--model {source}: no such folder")
    if gguf and looks_local and not (path / gguf).is_file():
        raise ValueError(f"--gguf-file {gguf}: not found in {source}")
