"""Evaluation metrics from graded samples.

Engine-agnostic: whatever sampled n responses per question hands over, per benchmark, one
list per question of :class:`Sample`. With c correct out of n for a question:

- ``avg@n`` = mean over questions of c/n (the expected accuracy of one sample);
- ``pass@k`` = mean over questions of 1 − C(n−c, k)/C(n, k), the unbiased estimator of the
  chance that at least one of k samples is correct (Chen et al. 2021, "Evaluating Large
  Language Models Trained on Code");
- ``response_length`` = mean length over all samples;
- ``truncated_frac`` = the share of samples cut at the length limit;
- ``reward`` = the task's mean reward over all samples, graded as in training (a dense reward
  moves before exact answers do; a truncated sample gets the task's ``truncated_reward``).

``eval/average/...`` is the unweighted mean over benchmarks (each benchmark counts once,
whatever its size).
"""

from __future__ import annotations

from typing import Mapping, NamedTuple, Optional, Sequence


class Sample(NamedTuple):
    """One evaluation sample: right or not, its length in tokens, cut at the limit or not, and its reward."""

    correct: bool
    length: int
    truncated: bool
    reward: float


def pass_at_k(n: int, c: int, k: int) -> float:
    """1 − C(n−c, k)/C(n, k): probability that k of the n samples, drawn without replacement, hold a correct one."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"need 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}")
    if n - c < k:
        return 1.0
    # C(n−c, k)/C(n, k) = Π_{i=n−c+1}^{n} (1 − k/i), which stays exact-ish for large n.
    fail = 1.0
    for i in range(n - c + 1, n + 1):
        fail *= 1.0 - k / i
    return 1.0 - fail


def default_ks(n: int) -> list[int]:
    """Powers of two below n, and n itself."""
    ks, k = [], 1
    while k < n:
        ks.append(k)
        k *= 2
    return ks + [n]


def summarize(
    results: Mapping[str, Sequence[Sequence[Sample]]], ks: Optional[Sequence[int]] = None
) -> dict[str, float]:
    """Metrics keyed ``eval/<benchmark>/avg@<n>``, ``…/pass@<k>``, ``…/response_length``, ``…/truncated_frac``,
    ``…/reward`` and ``eval/average/…``.

    Every question of a benchmark must have the same number n of samples; ks larger than n
    are skipped for that benchmark. Averages cover the keys every benchmark has.
    """
    metrics: dict[str, float] = {}
    per_benchmark: list[dict[str, float]] = []
    for name, questions in results.items():
        if not questions:
            raise ValueError(f"benchmark {name!r} has no questions")
        sizes = {len(samples) for samples in questions}
        if len(sizes) != 1 or 0 in sizes:
            raise ValueError(
                f"benchmark {name!r}: every question needs the same number (≥1) of samples, got {sorted(sizes)}"
            )
        n = sizes.pop()
        counts = [sum(bool(sample.correct) for sample in samples) for samples in questions]
        every = [sample for samples in questions for sample in samples]
        own = {f"avg@{n}": sum(counts) / (n * len(counts))}
        for k in ks if ks is not None else default_ks(n):
            if k <= n:
                own[f"pass@{k}"] = sum(pass_at_k(n, c, k) for c in counts) / len(counts)
        own["response_length"] = sum(sample.length for sample in every) / len(every)
        own["truncated_frac"] = sum(bool(sample.truncated) for sample in every) / len(every)
        own["reward"] = sum(sample.reward for sample in every) / len(every)
        per_benchmark.append(own)
        metrics.update({f"eval/{name}/{key}": value for key, value in own.items()})
    if per_benchmark:
        shared = [key for key in per_benchmark[0] if all(key in own for own in per_benchmark)]
        for key in shared:
            metrics[f"eval/average/{key}"] = sum(own[key] for own in per_benchmark) / len(per_benchmark)
    return metrics
