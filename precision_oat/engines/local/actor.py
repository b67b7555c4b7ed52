"""The embedded actor: prompts → G samples → rewards, as a :class:`Rollout`."""

from __future__ import annotations

import math
import time
from typing import Sequence

from precision_oat.args import Args
from precision_oat.rollout import Rollout, collate
from precision_oat.sampling import Completion, Sampler, SamplingParams, stop_token_ids
from precision_oat.tasks.base import Example, Task


class PrecisionActor:
    def __init__(self, args: Args, sampler: Sampler, task: Task, tokenizer):
        self.args = args
        self.sampler = sampler
        self.task = task
        self.tokenizer = tokenizer
        self.stop_ids = stop_token_ids(tokenizer)

    def encode(self, example: Example) -> list[int]:
        return self.tokenizer(self.task.render(example), add_special_tokens=False).input_ids

    def sample(self, examples: Sequence[Example], params: SamplingParams) -> tuple[list[Completion], list[str]]:
        completions = self.sampler.generate([self.encode(e) for e in examples], params)
        texts = self.tokenizer.batch_decode([c.response_ids for c in completions], skip_special_tokens=True)
        return completions, texts

    def params(self, seed: int) -> SamplingParams:
        r = self.args.rollout
        return SamplingParams(r.num_samples, r.temperature, r.top_p, r.max_new_tokens, self.stop_ids, seed)

    def rollout(self, examples: Sequence[Example], step: int) -> tuple[Rollout, dict[str, float]]:
        start = time.perf_counter()
        completions, texts = self.sample(examples, self.params(seed=self.args.train.seed * 1_000_003 + step))
        elapsed = time.perf_counter() - start
        g = self.args.rollout.num_samples
        repeated = [e for e in examples for _ in range(g)]
        truncated = [not c.finished for c in completions]
        rewards = self.task.score(texts, repeated, truncated)
        if any(not math.isfinite(r) for r in rewards):
            bad = next(i for i, r in enumerate(rewards) if not math.isfinite(r))
            raise ValueError(f"task {self.task.name!r} returned a non-finite reward {rewards[bad]} for {texts[bad]!r}")
        rollout = collate(completions, rewards, g, self.tokenizer.pad_token_id)
        lengths = [len(c.response_ids) for c in completions]
        tokens = sum(lengths)
        stats = {
            "reward/mean": sum(rewards) / len(rewards),
            "reward/std": _std(rewards),
            "response/length_mean": tokens / len(lengths),
            "response/length_max": float(max(lengths)),
            "response/truncated_frac": sum(truncated) / len(truncated),
            "perf/sample_tokens_per_s": tokens / max(elapsed, 1e-9),
        }
        return rollout, stats


def _std(xs: list[float]) -> float:
    mean = sum(xs) / len(xs)
    return (sum((x - mean) ** 2 for x in xs) / len(xs)) ** 0.5
