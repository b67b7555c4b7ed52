"""What Python's garbage collector costs vLLM's sampling, with a run's own sampler.

    python benchmarks/sampler_gc.py [--repeats 3] [--output OUT.json] -- FLAGS OF python -m precision_oat.main

e.g. SmolLM2's 128 × 8 step on one GPU:

    python benchmarks/sampler_gc.py -- --model <HF folder> --sampler vllm --device cuda --dtype fp16 \\
        --prompts-per-step 128 --num-samples 8 --max-new-tokens 768 --no-vllm-row-seeds

Builds the policy and the sampler as a run does, then samples one step's batch (``--prompts-per-step`` random
prompts of 64 tokens × ``--num-samples``, every response ``--max-new-tokens`` long) ``--repeats`` times each
way, alternating: as the sampler does it, with Python's cyclic collector paused while a batch is generated,
and with the collector running. Each batch's tokens per second, and the collections that ran during it
and the seconds they took, are printed and written to ``--output`` (JSON).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import statistics
import time
from pathlib import Path

WAYS = ("paused", "collecting")
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
    from precision_oat.presets import parse_args
    from precision_oat.rl.step import finished
    from precision_oat.samplers import build_sampler
    from precision_oat.samplers import vllm_sampler
    from precision_oat.samplers.sampler import SamplingParams

    parser = command_line()
    ours, run_flags = parser.parse_known_args(argv)
    if ours.repeats < 1:
        parser.error(f"--repeats {ours.repeats}: must be at least 1")
    args = parse_args([f for f in run_flags if f != "--"])
    if args.rollout.sampler != "vllm":
        parser.error("--sampler vllm: the collector is paused by the vLLM sampler only")
    device = resolve_device(args.train.device)
    policy = load_policy(args.model)
    folder = Path(args.log.output_dir or "runs/sampler_gc") / "vllm_init"
    sampler = build_sampler(policy, args.precision.build(), device, args.rollout, args.train.seed, folder=folder)
    r = args.rollout
    generator = torch.Generator().manual_seed(0)
    prompts = torch.randint(3, policy.model.config.vocab_size, (r.prompts_per_step, PROMPT_TOKENS),
                            generator=generator).tolist()
    paused = vllm_sampler._collector_paused

    def batch(way: str, seed: int) -> dict:
        vllm_sampler._collector_paused = paused if way == "paused" else contextlib.nullcontext
        params = SamplingParams(n=r.num_samples, temperature=r.temperature, top_p=r.top_p, max_new_tokens=r.max_new_tokens,
                                stop_token_ids=(), seed=seed)
        try:
            gc.collect()
            start = finished(device)
            with Collections() as collections:
                completions = sampler.generate(prompts, params)
            elapsed = finished(device) - start
        finally:
            vllm_sampler._collector_paused = paused
        tokens = sum(len(c.response_ids) for c in completions)
        return {"tokens_per_s": tokens / elapsed, "seconds": elapsed, "collections": collections.count,
                "collection_s": collections.seconds}

    batch("paused", seed=0)  # the first batch of a shape compiles and captures; it is not timed
    runs = {way: [] for way in WAYS}
    for i in range(ours.repeats):
        for way in WAYS:
            runs[way].append(batch(way, seed=i + 1))
            print(f"{way:10s} {runs[way][-1]['tokens_per_s']:10,.0f} tok/s  {runs[way][-1]['seconds']:7.2f} s  "
                  f"{runs[way][-1]['collections']:5d} collections  {runs[way][-1]['collection_s']:6.2f} s in them",
                  flush=True)
    median = {way: statistics.median(run["tokens_per_s"] for run in runs[way]) for way in WAYS}
    print(f"median tok/s: paused {median['paused']:,.0f}, collecting {median['collecting']:,.0f} "
          f"({median['paused'] / median['collecting']:.2f}x)", flush=True)
    result = {"settings": {"flags": run_flags, "repeats": ours.repeats, "device": str(device)},
              "median_tokens_per_s": median, "batches": runs}
    if ours.output is not None:
        ours.output.parent.mkdir(parents=True, exist_ok=True)
        ours.output.write_text(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
