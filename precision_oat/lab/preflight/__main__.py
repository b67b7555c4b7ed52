"""``python -m precision_oat.lab.preflight``: the fp16 preflight of :mod:`precision_oat.lab.preflight` on a
model and prompts given as the mismatch lab takes them; prints the table, writes ``OUTPUT_DIR/preflight.json``."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from precision_oat import checks
from precision_oat.errors import UserError
from precision_oat.lab.preflight import DEFAULT_MARGIN, check, format_report, run_preflight
from precision_oat.lab.prompts import PromptSource, check_prompt_source, load_prompts
from precision_oat.precision.policy import LossScaling
from precision_oat.runs.folder import make_output_dir
from precision_oat.samplers.sampler import SamplingParams, stop_token_ids


@dataclass
class PreflightArgs(PromptSource):
    """Check before an fp16 run that activations fit under 65504 and gradients survive the loss scale."""

    # Prompts per forward.
    micro_batch_size: int = 8
    # "auto" picks CUDA when available.
    device: Literal["auto", "cpu", "cuda"] = "auto"
    # Tokens of the response sampled after each prompt (fp32, temperature 1) and measured with it; 0 measures prompts alone.
    response_tokens: int = 64
    # Loss scale of the first fp16 step (the training default).
    initial_loss_scale: float = LossScaling.initial_scale
    # Fail when an activation is within this factor of 65504 (headroom below it).
    margin: float = DEFAULT_MARGIN
    # Folder for preflight.json.
    output_dir: Path = Path("runs/preflight")


def preflight_from_args(args: PreflightArgs, log=print) -> dict:
    """Load the model and prompts as the mismatch lab does, run the preflight, write preflight.json."""
    from precision_oat.args import ModelArgs
    from precision_oat.models import load_policy, resolve_device

    check_prompt_source(args)
    checks.integer(args, "response_tokens", 0)
    checks.folder(args, "output_dir")
    device = resolve_device(args.device)
    policy = load_policy(ModelArgs(model=args.model, gguf_file=args.gguf_file), log)
    prompts = load_prompts(args, policy.tokenizer)
    if not prompts:
        raise UserError(f"--prompt-data {args.prompt_data}: no prompts to run the preflight on")
    prompt_ids = [policy.tokenizer(p, add_special_tokens=False).input_ids for p in prompts]
    responses = SamplingParams(max_new_tokens=args.response_tokens, stop_token_ids=stop_token_ids(policy.tokenizer),
                               seed=0) if args.response_tokens > 0 else None
    report = run_preflight(policy.model, prompt_ids, initial_loss_scale=args.initial_loss_scale, device=device,
                           micro_batch_size=args.micro_batch_size, responses=responses)
    out = make_output_dir(Path(args.output_dir))
    (out / "preflight.json").write_text(json.dumps(report, indent=2, allow_nan=False))
    log(format_report(report))
    log(f"wrote {out / 'preflight.json'}")
    return report


def cli(argv=None) -> dict:
    import tyro

    args = tyro.cli(PreflightArgs, args=argv, prog="python -m precision_oat.lab.preflight")
    try:
        report = preflight_from_args(args, log=lambda line: print(line, flush=True))
        check(report, args.margin)
    except UserError as e:
        sys.exit(f"error: {e}")
    return report


if __name__ == "__main__":
    cli()
