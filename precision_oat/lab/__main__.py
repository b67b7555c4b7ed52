"""``python -m precision_oat.lab``: the mismatch lab (see :mod:`precision_oat.lab.lab`).

Examples::

    python -m precision_oat.lab                 # embedded tiny policy, CPU or GPU
    python -m precision_oat.lab --model DIR --gguf-file SmolLM2-135M-Instruct.Q4_1.gguf \\
        --prompt-data prompts.jsonl --prompt-template chat --num-prompts 128 --max-new-tokens 512
    python -m precision_oat.lab --sampler vllm --trainer deepspeed   # the paper's pair: a CUDA machine
                                                                     # with pip install -e ".[vllm,deepspeed]"

What cannot run here (a stack this Python lacks, fp16 with DeepSpeed without CUDA) fails in
one line before the first sample.
"""

from __future__ import annotations

import sys

import tyro

from precision_oat.errors import UserError
from precision_oat.lab.lab import LabArgs, run_lab


def cli(argv=None) -> dict:
    args = tyro.cli(LabArgs, args=argv, prog="python -m precision_oat.lab")
    try:
        return run_lab(args, log=lambda line: print(line, flush=True))
    except UserError as e:
        sys.exit(f"error: {e}")


if __name__ == "__main__":
    cli()
