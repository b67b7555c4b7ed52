"""Learner step time and sampler throughput per dtype (the cost side of choosing fp16 or bf16).

    python benchmarks/step_time.py --model DIR [--gguf-file F] --dtypes fp16 bf16 --output OUT.json

What it times, on the same weights and synthetic tokens for every dtype d:
    learner  one :meth:`PrecisionLearner.learn` call = rescoring (full forward, no grad) + forward/
             backward of every micro-batch + unscale/clip/AdamW on the fp32 masters + the cast back
             to d; ``batch`` sequences of ``prompt_len + response_len`` tokens, algo pg. Mean of
             ``iters`` calls after ``warmup`` calls (CUDA synchronised).
    sampler  :class:`KVCacheSampler` generating ``response_len`` tokens for ``batch`` prompts with
             no stop token (so every row runs to the end); response tokens per second.
Figures printed and written to ``--output`` (JSON). Results of the H200 run are in
``benchmarks/results/h200_step_time.json`` (command in docs/results.md).
"""

from __future__ import annotations

import copy
import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal, Optional

import torch
import tyro

from precision_oat.precision import DType


@dataclass
class BenchArgs:
    """Time the learner step and the sampler per dtype."""

    # HF model id or folder; None uses the embedded tiny arithmetic policy.
    model: Optional[str] = None
    # GGUF file inside --model.
    gguf_file: Optional[str] = None
    # Dtypes to time (sampler and trainer both in each).
    dtypes: tuple[DType, ...] = ("fp16", "bf16")
    # Sequences per learner step and prompts per sampler call.
    batch: int = 128
    # Prompt tokens per sequence.
    prompt_len: int = 64
    # Response tokens per sequence.
    response_len: int = 256
    # Sequences per forward/backward.
    micro_batch_size: int = 64
    # Untimed calls before timing.
    warmup: int = 2
    # Timed learner calls.
    iters: int = 5
    # "auto" picks CUDA when available.
    device: Literal["auto", "cpu", "cuda"] = "auto"
    # JSON file for the figures; None only prints them.
    output: Optional[Path] = None


def synthetic_rollout(args: BenchArgs, vocab: int, seed: int = 0):
    from precision_oat.rollout import collate
    from precision_oat.sampling import Completion

    g = torch.Generator().manual_seed(seed)
    completions = [
        Completion(torch.randint(3, vocab, (args.prompt_len,), generator=g).tolist(),
                   torch.randint(3, vocab, (args.response_len,), generator=g).tolist(),
                   (-torch.rand(args.response_len, generator=g) * 3).tolist(), False)
        for _ in range(args.batch)
    ]
    rewards = torch.randint(0, 2, (args.batch,), generator=g).float().tolist()
    return collate(completions, rewards, group_size=8 if args.batch % 8 == 0 else 1, pad_token_id=0)


def time_learner(args: BenchArgs, model, dtype: DType, device: torch.device) -> float:
    from precision_oat.algorithms import compose
    from precision_oat.args import Args, TrainArgs, algorithm_spec
    from precision_oat.engines.local.learner import PrecisionLearner
    from precision_oat.precision import Precision

    train_args = Args(train=TrainArgs(micro_batch_size=args.micro_batch_size, learning_rate=1e-7))
    spec = algorithm_spec(train_args)
    precision = Precision.from_flags(dtype)
    learner = compose(spec, PrecisionLearner)(train_args, copy.deepcopy(model), precision, spec, device)
    rollout = synthetic_rollout(args, model.config.vocab_size).to(device)
    times = []
    for i in range(args.warmup + args.iters):
        _sync(device)
        start = time.perf_counter()
        learner.learn(rollout, i)
        _sync(device)
        times.append(time.perf_counter() - start)
    del learner
    return sum(times[args.warmup :]) / args.iters


def time_sampler(args: BenchArgs, model, dtype: DType, device: torch.device) -> float:
    from precision_oat.engines.local.sampler import KVCacheSampler
    from precision_oat.precision import TORCH_DTYPES
    from precision_oat.sampling import SamplingParams

    sampler = KVCacheSampler(model, TORCH_DTYPES[dtype], device, pad_token_id=0)
    prompts = synthetic_rollout(args, model.config.vocab_size).input_ids[:, : args.prompt_len].tolist()
    sampler.generate(prompts[:8], SamplingParams(1, 1.0, 1.0, 8, (), 0))
    _sync(device)
    start = time.perf_counter()
    sampler.generate(prompts, SamplingParams(1, 1.0, 1.0, args.response_len, (), 0))
    _sync(device)
    elapsed = time.perf_counter() - start
    del sampler
    return args.batch * args.response_len / elapsed


def main(args: BenchArgs) -> dict:
    from precision_oat.args import ModelArgs
    from precision_oat.engines.local.loop import resolve_device
    from precision_oat.models import load_policy

    device = resolve_device(args.device)
    model = load_policy(ModelArgs(model=args.model, gguf_file=args.gguf_file)).model
    rows = {}
    for dtype in args.dtypes:
        step_s = time_learner(args, model, dtype, device)
        tok_s = time_sampler(args, model, dtype, device)
        rows[dtype] = {"learner_step_s": step_s, "sampler_tokens_per_s": tok_s}
        print(f"{dtype}: learner step {step_s * 1000:.1f} ms  ·  sampler {tok_s:,.0f} tok/s", flush=True)
        if device.type == "cuda":
            torch.cuda.empty_cache()
    result = {
        "settings": {**{k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(args).items()},
                     "device": str(device), "torch": torch.__version__,
                     "gpu": torch.cuda.get_device_name(device) if device.type == "cuda" else None},
        "dtypes": rows,
    }
    if "fp16" in rows and "bf16" in rows:
        result["fp16_over_bf16_step_time"] = rows["fp16"]["learner_step_s"] / rows["bf16"]["learner_step_s"]
        result["fp16_over_bf16_sampler_throughput"] = (
            rows["fp16"]["sampler_tokens_per_s"] / rows["bf16"]["sampler_tokens_per_s"])
        print(f"fp16/bf16: step time {result['fp16_over_bf16_step_time']:.3f}x  "
              f"sampler throughput {result['fp16_over_bf16_sampler_throughput']:.3f}x", flush=True)
    if args.output is not None:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(json.dumps(result, indent=2))
    return result


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


if __name__ == "__main__":
    main(tyro.cli(BenchArgs))
