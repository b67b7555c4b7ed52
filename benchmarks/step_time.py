"""Learner step time and sampler throughput per dtype, learner and sampler (the cost side of the choice).

    python benchmarks/step_time.py --model DIR [--gguf-file F] --dtypes fp16 bf16 \
        --learners builtin deepspeed --samplers builtin vllm --output OUT.json

What it times, on the same weights and synthetic tokens for every dtype d:
    learner  one ``update`` call of the shared RL step = rescoring (full forward, no grad) +
             forward/backward of every micro-batch + the optimiser step, with the built-in learner
             (fp32 masters, our scaler) or DeepSpeed; ``batch`` sequences of ``prompt_len +
             response_len`` tokens, algo pg. Median of ``iters`` calls after ``warmup`` calls.
    sampler  the built-in KV-cache sampler or vLLM generating ``response_len`` tokens for ``batch``
             prompts with no stop token (so every row runs to the end); response tokens per second.
             ``vllm-batch-seeded`` is vLLM with ``--no-vllm-row-seeds``: one seed for the batch
             instead of one per sequence.
With ``--rounds N`` the whole sweep runs N times, the dtypes in turn first and last, so that a drift
over the run (clocks, caches) falls on both; each figure is the median over the rounds and each
fp16/bf16 ratio the median of the rounds' ratios. ``spread`` holds each figure's lowest and highest
value over every timed call of every round.
Figures printed and written to ``--output`` (JSON). Results of the H200 runs are in
``benchmarks/results/h200_step_time.json`` and ``benchmarks/results/h200_round7/speed/`` (commands
in docs/results.md).
"""

from __future__ import annotations

import copy
import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from statistics import median
from typing import Literal, Optional

import torch
import tyro

from precision_oat.precision.policy import DType


@dataclass
class BenchArgs:
    """Time the learner step and the sampler per dtype."""

    # HF model id or folder; None uses the embedded tiny arithmetic policy.
    model: Optional[str] = None
    # GGUF file inside --model.
    gguf_file: Optional[str] = None
    # Dtypes to time (sampler and trainer both in each).
    dtypes: tuple[DType, ...] = ("fp16", "bf16")
    # Learners to time.
    learners: tuple[Literal["builtin", "deepspeed"], ...] = ("builtin",)
    # Samplers to time.
    samplers: tuple[Literal["builtin", "vllm", "vllm-batch-seeded"], ...] = ("builtin",)
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
    # Sweeps over the dtypes, in alternating order; figures are medians over them.
    rounds: int = 1
    # "auto" picks CUDA when available.
    device: Literal["auto", "cpu", "cuda"] = "auto"
    # JSON file for the figures; None only prints them.
    output: Optional[Path] = None


def synthetic_rollout(args: BenchArgs, vocab: int, seed: int = 0):
    from precision_oat.rl.rollout import collate
    from precision_oat.samplers.sampler import Completion

    g = torch.Generator().manual_seed(seed)
    completions = [
        Completion(torch.randint(3, vocab, (args.prompt_len,), generator=g).tolist(),
                   torch.randint(3, vocab, (args.response_len,), generator=g).tolist(),
                   (-torch.rand(args.response_len, generator=g) * 3).tolist(), False)
        for _ in range(args.batch)
    ]
    rewards = torch.randint(0, 2, (args.batch,), generator=g).float().tolist()
    return collate(completions, rewards, group_size=8 if args.batch % 8 == 0 else 1, pad_token_id=0)


def time_learner(args: BenchArgs, model, dtype: DType, learner_kind: str, device: torch.device) -> list[float]:
    """Seconds of each timed ``update`` call."""
    from precision_oat.args import Args, PrecisionArgs, TrainArgs
    from precision_oat.backends.local.driver import build_learner
    from precision_oat.rl.settings import learner_settings

    flags = Args(precision=PrecisionArgs(dtype=dtype),
                 train=TrainArgs(micro_batch_size=args.micro_batch_size, learning_rate=1e-7, learner=learner_kind))
    learner = build_learner(copy.deepcopy(model), learner_settings(flags, device))
    rollout = synthetic_rollout(args, model.config.vocab_size).to(device)
    times = []
    for i in range(args.warmup + args.iters):
        _sync(device)
        start = time.perf_counter()
        learner.update(rollout, i)
        _sync(device)
        times.append(time.perf_counter() - start)
    del learner
    return times[args.warmup :]


def sampler_settings(args: BenchArgs, sampler_kind: str):
    """The timed sampler's settings. Its engine never sleeps: this one process starts an engine per dtype, and
    vLLM's sleep-mode allocator serves a single engine per process."""
    from precision_oat.args import RolloutArgs

    return RolloutArgs(sampler="builtin" if sampler_kind == "builtin" else "vllm", max_new_tokens=args.response_len,
                       max_prompt_length=args.prompt_len, vllm_gpu_memory_utilization=0.2,
                       vllm_row_seeds=sampler_kind != "vllm-batch-seeded", vllm_sleep=False)


def time_sampler(args: BenchArgs, policy, dtype: DType, sampler_kind: str, device: torch.device, folder: Path) -> float:
    from precision_oat.precision.policy import Precision
    from precision_oat.samplers import build_sampler
    from precision_oat.samplers.sampler import SamplingParams

    sampler = build_sampler(policy, Precision.from_flags(dtype), device, sampler_settings(args, sampler_kind), 0,
                            folder=folder)
    prompts = synthetic_rollout(args, policy.model.config.vocab_size).input_ids[:, : args.prompt_len].tolist()
    sampler.generate(prompts[:8], SamplingParams(1, 1.0, 1.0, 8, (), 0))
    _sync(device)
    start = time.perf_counter()
    sampler.generate(prompts, SamplingParams(1, 1.0, 1.0, args.response_len, (), 0))
    _sync(device)
    elapsed = time.perf_counter() - start
    del sampler
    return args.batch * args.response_len / elapsed


def sweep(args: BenchArgs, policy, dtypes: list[DType], device: torch.device, folder: Path) -> dict:
    """One pass over ``dtypes``: every timed value of each figure, by dtype then figure."""
    samples: dict[str, dict[str, list[float]]] = {}
    for dtype in dtypes:
        row = samples.setdefault(dtype, {})
        for kind in args.learners:
            row[f"learner_step_s/{kind}"] = time_learner(args, policy.model, dtype, kind, device)
            print(f"{dtype}: {kind} learner step {median(row[f'learner_step_s/{kind}']) * 1000:.1f} ms", flush=True)
        for kind in args.samplers:
            row[f"sampler_tokens_per_s/{kind}"] = [time_sampler(args, policy, dtype, kind, device, folder)]
            print(f"{dtype}: {kind} sampler {row[f'sampler_tokens_per_s/{kind}'][0]:,.0f} tok/s", flush=True)
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return samples


def main(args: BenchArgs) -> dict:
    from precision_oat.args import ModelArgs
    from precision_oat.models import load_policy, resolve_device

    device = resolve_device(args.device)
    policy = load_policy(ModelArgs(model=args.model, gguf_file=args.gguf_file))
    folder = Path(args.output or "runs/step_time").with_suffix("") / "vllm_init"
    rounds = []
    for r in range(args.rounds):
        if args.rounds > 1:
            print(f"round {r + 1}/{args.rounds}", flush=True)
        rounds.append(sweep(args, policy, list(args.dtypes)[:: -1 if r % 2 else 1], device, folder))
    rows = {d: {k: median(median(one[d][k]) for one in rounds) for k in rounds[0][d]} for d in args.dtypes}

    def every_value(dtype: str, key: str) -> list[float]:
        return [x for one in rounds for x in one[dtype][key]]

    result = {
        "settings": {**{k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(args).items()},
                     "device": str(device), "torch": torch.__version__,
                     "gpu": torch.cuda.get_device_name(device) if device.type == "cuda" else None},
        "dtypes": rows,
        "spread": {d: {k: [min(every_value(d, k)), max(every_value(d, k))] for k in rows[d]} for d in rows},
    }
    if "fp16" in rows and "bf16" in rows:
        result["fp16_over_bf16"] = {k: median(median(one["fp16"][k]) / median(one["bf16"][k]) for one in rounds)
                                    for k in rows["fp16"]}
        print("fp16/bf16: " + "  ".join(f"{k} {v:.3f}x" for k, v in result["fp16_over_bf16"].items()), flush=True)
    if args.output is not None:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(json.dumps(result, indent=2))
    return result


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


if __name__ == "__main__":
    main(tyro.cli(BenchArgs))
