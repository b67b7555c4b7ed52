"""Loading the policy: an HF id or folder, a GGUF checkpoint, or the embedded tiny model."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from precision_oat.args import ModelArgs
from precision_oat.errors import UserError
from precision_oat.quiet import no_transformers_progress_bars


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
        # ModelArgs has checked that a local-looking --model is a folder holding --gguf-file.
        local = Path(args.model).expanduser()
        source, gguf = str(local) if local.is_dir() else args.model, args.gguf_file
        folder = local if local.is_dir() and gguf is None else None
    kwargs = {"gguf_file": gguf} if gguf else {}
    tokenizer_source = args.tokenizer or source
    try:
        tokenizer = AutoTokenizer.from_pretrained(tokenizer_source, **({} if args.tokenizer else kwargs))
    except (OSError, ValueError) as e:
        flag = "--tokenizer" if args.tokenizer else "--model"
        raise UserError(f"{flag} {tokenizer_source}: could not load its tokenizer ({_one_line(e)})") from e
    try:
        with no_transformers_progress_bars():
            model = AutoModelForCausalLM.from_pretrained(source, attn_implementation=args.attn_implementation, **kwargs)
    except ImportError as e:  # the kernel of --attn-implementation needs a package that is missing
        raise UserError(
            f"--attn-implementation {args.attn_implementation}: {_one_line(e)}; install it or use --attn-implementation sdpa"
        ) from e
    except (OSError, ValueError) as e:
        raise UserError(f"--model {source}: could not load it ({_one_line(e)})") from e
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


def resolve_device(choice: str):
    """``--device``: "auto" picks CUDA when a device is visible."""
    import torch

    if choice == "cuda" and not torch.cuda.is_available():
        raise UserError("--device cuda: no CUDA device is visible; use --device cpu")
    return torch.device("cuda" if choice == "cuda" or (choice == "auto" and torch.cuda.is_available()) else "cpu")


def _one_line(error: Exception) -> str:
    """An exception's message on one line, cut to a readable length."""
    text = " ".join(str(error).split()) or type(error).__name__
    return text if len(text) <= 300 else text[:297] + "..."
