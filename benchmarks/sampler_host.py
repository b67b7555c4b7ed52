"""What the vLLM sampler's Python-side choices save its sampling, with a run's own sampler.

    python benchmarks/sampler_host.py [--repeats 3] [--output OUT.json] -- FLAGS OF python -m precision_oat.main

e.g. SmolLM2's 128 × 8 step on one GPU:

    python benchmarks/sampler_host.py -- --model <HF folder> --sampler vllm --device cuda --dtype fp16 \\
        --prompts-per-step 128 --num-samples 8 --max-new-tokens 768 --no-vllm-row-seeds

Builds the policy and the sampler as a run does, then samples one step's batch (``--prompts-per-step`` random
prompts of 64 tokens × ``--num-samples``, every response ``--max-new-tokens`` long) ``--repeats`` times each
way, in turn:

    sampler          as the sampler does it: the log-probs in vLLM's flat lists, Python's cyclic garbage
                     collector paused while the batch is generated
    collecting       the flat lists, the collector running
    logprob-dicts    a dict of log-probs per token (vLLM's default), the collector paused
    neither          a dict per token, the collector running (what the sampler did before either)

Each batch's tokens per second, and the collections that ran during it and the seconds they took, are
printed and written to ``--output`` (JSON).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import statistics
import time
from pathlib import Path

# Each way: (flat log-prob lists, the collector paused).
WAYS = {"sampler": (True, True), "collecting": (True, False), "logprob-dicts": (False, True), "neither": (False, False)}
PROMPT_TOKENS = 64


def command_line() -> argparse.ArgumentParser:
    """This script's own flags; the rest (after ``--``) are the run's."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=3, help="timed batches of each way")
    parser.add_argument("--output", type=Path, help="JSON file of the figures")
    return parser


class Collections:
    """The collector's runs while this is entered: how many, and the seconds they took."""

    def __enter__(self):
        self.count, self.seconds, self._start = 0, 0.0, None
        gc.callbacks.append(self._record)
        return self

    def __exit__(self, *exc):
        gc.callbacks.remove(self._record)

    def _record(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._start = time.perf_counter()
        elif self._start is not None:
            self.count += 1
            self.seconds += time.perf_counter() - self._start


def main(argv=None) -> dict:
    import torch

    from precision_oat.models import load_policy, resolve_device
    from precision_oat.rl.step import finished
    from precision_oat.samplers import build_sampler, vllm_sampler
    from precision_oat.samplers.sampler import SamplingParams
    from precision_oat.timing_scripts import figures, script_and_run_args

    parser = command_line()
    ours, run_flags, args = script_and_run_args(parser, argv)
    if args.rollout.sampler != "vllm":
        parser.error(f"--sampler {args.rollout.sampler}: this measures the vLLM sampler's host work; "
                     "pass --sampler vllm")
    device = resolve_device(args.train.device)
    policy = load_policy(args.model)
    folder = Path(args.log.output_dir or "runs/sampler_host") / "vllm_init"
    sampler = build_sampler(policy, args.precision.build(), device, args.rollout, args.train.seed, folder=folder)
    r = args.rollout
    generator = torch.Generator().manual_seed(0)
    prompts = torch.randint(3, policy.model.config.vocab_size, (r.prompts_per_step, PROMPT_TOKENS),
                            generator=generator).tolist()
    paused, requests = vllm_sampler.collector_paused, vllm_sampler.request_params

    def batch(way: str, seed: int) -> dict:
        flat, pause = WAYS[way]
        params = SamplingParams(n=r.num_samples, temperature=r.temperature, top_p=r.top_p, max_new_tokens=r.max_new_tokens,
                                stop_token_ids=(), seed=seed)
        try:
            if not pause:
                vllm_sampler.collector_paused = contextlib.nullcontext
            if not flat:
                vllm_sampler.request_params = lambda *a, **k: requests(*a, **{**k, "flat_logprobs": False})
            gc.collect()
            start = finished(device)
            with Collections() as collections:
                completions = sampler.generate(prompts, params)
            elapsed = finished(device) - start
        finally:
            vllm_sampler.collector_paused, vllm_sampler.request_params = paused, requests
        tokens = sum(len(c.response_ids) for c in completions)
        return {"tokens_per_s": tokens / elapsed, "seconds": elapsed, "collections": collections.count,
                "collection_s": collections.seconds}

    batch("sampler", seed=0)  # the first batch of a shape compiles and captures; it is not timed
    runs = {way: [] for way in WAYS}
    for i in range(ours.repeats):
        for way in WAYS:
            runs[way].append(batch(way, seed=i + 1))
            print(f"{way:14s} {runs[way][-1]['tokens_per_s']:10,.0f} tok/s  {runs[way][-1]['seconds']:7.2f} s  "
                  f"{runs[way][-1]['collections']:5d} collections  {runs[way][-1]['collection_s']:6.2f} s in them",
                  flush=True)
    median = {way: statistics.median(run["tokens_per_s"] for run in runs[way]) for way in WAYS}
    print("median tok/s: " + ", ".join(f"{way} {median[way]:,.0f}" for way in WAYS) + " · the sampler's over "
          + ", ".join(f"{way} {median['sampler'] / median[way]:.2f}x" for way in WAYS if way != "sampler"), flush=True)
    return figures(ours, run_flags, device, median_tokens_per_s=median, batches=runs)


if __name__ == "__main__":
    main()
