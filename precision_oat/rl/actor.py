"""The actor side of an RL step, shared by every backend: prompts → G samples → rewards → a :class:`Rollout`.

It takes a sampler (any :class:`~precision_oat.samplers.sampler.Sampler`), a task and the rollout
settings; the backend decides where it runs and how weights reach the sampler.
"""

from __future__ import annotations

import dataclasses
import math
import time
from typing import Sequence

from precision_oat.args import EvalArgs, RolloutArgs
from precision_oat.distributed.world import SINGLE, World
from precision_oat.errors import SAMPLER_MEMORY_FLAGS, out_of_memory_explained
from precision_oat.rl.rollout import Rollout, collate
from precision_oat.samplers.sampler import Completion, Sampler, SamplingParams, stop_token_ids
from precision_oat.samplers.stop_strings import cut_at_stop_strings
from precision_oat.seeds import EVALUATION, ROLLOUT, derive_seed
from precision_oat.tasks.evaluation import Sample, summarize
from precision_oat.tasks.task import Example, Task


class PrecisionActor:
    """Samples and grades; with several processes each samples its share of a batch and all get the whole of it."""

    def __init__(self, sampler: Sampler, task: Task, tokenizer, rollout: RolloutArgs, seed: int, world: World = SINGLE):
        self.sampler = sampler
        self.world = world
        self.task = task
        self.tokenizer = tokenizer
        self.settings = rollout
        self.seed = seed
        self.stop_ids = stop_token_ids(tokenizer)
        # The ranks of one tensor-parallel vLLM engine sample the same prompts.
        self.ranks_per_engine = getattr(sampler, "ranks_per_engine", 1)

    def encode(self, example: Example) -> list[int]:
        return encode_prompt(self.task, self.tokenizer, example)

    def sample(self, examples: Sequence[Example], params: SamplingParams) -> tuple[list[Completion], list[str]]:
        with out_of_memory_explained("the sampler's generation", SAMPLER_MEMORY_FLAGS):
            completions = self.sampler.generate([self.encode(e) for e in examples], params)
        if self.task.stop_strings:
            completions = [cut_at_stop_strings(c, self.tokenizer, self.task.stop_strings) for c in completions]
        texts = self.tokenizer.batch_decode([c.response_ids for c in completions], skip_special_tokens=True)
        return completions, texts

    def params(self, step: int) -> SamplingParams:
        """The rollout sampling of ``step``, counted from 0 (its own seed, so a resumed run draws the same)."""
        r = self.settings
        # With top-p the sampler reports what it kept, and the trainer scores under the same truncation.
        return SamplingParams(r.num_samples, r.temperature, r.top_p, r.max_new_tokens, self.stop_ids,
                              derive_seed(self.seed, ROLLOUT, step), kept_sets=r.top_p < 1)

    def experience(self, examples: Sequence[Example], step: int, first_prompt: int = 0):
        """G samples of each example, scored by the task: (completions, texts, rewards, statistics).

        ``first_prompt`` is where ``examples`` start in the step's whole batch, when they are
        one slice of it (an Oat actor samples the prompts of one learner).
        """
        start = time.perf_counter()
        first, mine = self.world.share(examples, self.ranks_per_engine)
        params = dataclasses.replace(self.params(step), first_prompt=first_prompt + first)
        completions, texts = self.sample(mine, params)
        sampled = time.perf_counter()
        g = self.settings.num_samples
        truncated = [not c.finished for c in completions]
        rewards = self.task.rewards(texts, [e for e in mine for _ in range(g)], truncated)
        check_rewards(rewards, texts, self.task.name)
        graded = time.perf_counter()
        parts = self.world.gather_shares((completions, texts, rewards, graded - start), self.ranks_per_engine)
        completions, texts, rewards = ([x for part in parts for x in part[i]] for i in range(3))
        elapsed = max(part[3] for part in parts)
        stats = rollout_stats(rewards, [len(c.response_ids) for c in completions],
                              [not c.finished for c in completions], elapsed)
        # This process's own times: they add up with the rest of its step.
        stats.update({"perf/time/sample": sampled - start, "perf/time/reward": graded - sampled})
        return completions, texts, rewards, stats

    def rollout(self, examples: Sequence[Example], step: int) -> tuple[Rollout, dict[str, float]]:
        """:meth:`experience` as the padded :class:`Rollout` a learner takes, and its statistics."""
        completions, _, rewards, stats = self.experience(examples, step)
        return collate(completions, rewards, self.settings.num_samples, self.tokenizer.pad_token_id), stats

    def eval_params(self, evaluation: EvalArgs, step: int) -> SamplingParams:
        """The evaluation sampling after ``step`` completed steps (0: before training)."""
        return SamplingParams(
            evaluation.eval_samples, evaluation.eval_temperature, evaluation.eval_top_p,
            evaluation.eval_max_new_tokens or self.settings.max_new_tokens, self.stop_ids,
            derive_seed(self.seed, EVALUATION, step),
        )

    def graded_samples(self, examples: Sequence[Example], params: SamplingParams) -> tuple[list[str], list[Sample]]:
        """``params.n`` samples of each example, in example order: their texts, and each graded for evaluation."""
        completions, texts = self.sample(examples, params)
        repeated = [e for e in examples for _ in range(params.n)]
        truncated = [not c.finished for c in completions]
        correct, rewards = self.task.grade(texts, repeated, truncated)
        return texts, [Sample(ok, len(c.response_ids), cut, reward)
                       for ok, c, cut, reward in zip(correct, completions, truncated, rewards)]

    def evaluate(self, evaluation: EvalArgs, step: int) -> dict[str, float]:
        """The ``eval/<benchmark>/…`` metrics (:func:`summarize`) on every benchmark of the task."""
        params = self.eval_params(evaluation, step)
        results = {}
        for name, examples in self.task.eval_sets().items():
            first, mine = self.world.share(examples, self.ranks_per_engine)
            _, samples = self.graded_samples(mine, dataclasses.replace(params, first_prompt=first))
            samples = [x for part in self.world.gather_shares(samples, self.ranks_per_engine) for x in part]
            results[name] = [samples[i : i + params.n] for i in range(0, len(samples), params.n)]
        return summarize(results) if results else {}


def encode_prompt(task: Task, tokenizer, example: Example) -> list[int]:
    """The token ids of ``example``'s prompt as the task renders it."""
    return tokenizer(task.render(example), add_special_tokens=False).input_ids


def check_rewards(rewards: Sequence[float], texts: Sequence[str], task_name: str) -> None:
    """A non-finite reward would poison every advantage of its group: stop at the first one."""
    bad = next((i for i, r in enumerate(rewards) if not math.isfinite(r)), None)
    if bad is not None:
        raise ValueError(f"task {task_name!r} returned a non-finite reward {rewards[bad]} for {texts[bad]!r}")


def rollout_stats(rewards: Sequence[float], lengths: Sequence[int], truncated: Sequence[bool], elapsed_s: float) -> dict:
    """``reward/…``, ``response/…`` and ``perf/sample_tokens_per_s`` of one rollout (same keys on every backend)."""
    mean = sum(rewards) / len(rewards)
    tokens = sum(lengths)
    return {
        "reward/mean": mean,
        "reward/std": (sum((r - mean) ** 2 for r in rewards) / len(rewards)) ** 0.5,
        "response/length_mean": tokens / len(lengths),
        "response/length_max": float(max(lengths)),
        "response/truncated_frac": sum(truncated) / len(truncated),
        "perf/sample_tokens_per_s": tokens / max(elapsed_s, 1e-9),
    }
