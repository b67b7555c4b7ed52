"""Long answers with an exact reward: continue a count, one number per line, up to a stated end.

The prompt is a raw continuation that a small pretrained LM keeps on task (chat prompts make
SmolLM2-135M-Instruct wander off at temperature 1)::

    Here are the numbers from 4127 to 4203, one per line:
    4127
    4128
    4129

and the answer is every number from a + 3 to b, one per line, then the end of the text. With
4-digit numbers (five tokens a line) and 60–100 numbers, a right answer is 285–485 tokens long:
the regime where the sequence log-ratio ρ = Σ_t Δ_t of bf16 grows large.

Reward, in [0, 1]: the longest strictly increasing run of the expected numbers that the
response's lines contain, divided by max(expected count, lines written). So a perfect count
scores 1; skipping the numbers that end in 9 (the model's habit) scores about 0.9; stopping
early, writing past b or drifting into prose cost in proportion; a response cut at the length
limit gets ``truncated_reward`` (``--truncated-reward``, 0 by default) unless that is None.
"""

from __future__ import annotations

import bisect
import random
import re
from typing import Optional, Sequence

from precision_oat.errors import UserError
from precision_oat.tasks.base import Example, Task

PROMPT = "Here are the numbers from {a} to {b}, one per line:\n{a}\n{a1}\n{a2}\n"


class CountingTask(Task):
    """``a``, ``b`` → the lines ``a+3 … b``; reward = in-order share of them (see the module docstring)."""

    name = "counting"

    def __init__(self, num_train: int = 512, num_eval: int = 64, seed: int = 4321, min_count: int = 60,
                 max_count: int = 100, low: int = 1000, high: int = 8999, template: str = "no",
                 truncated_reward: Optional[float] = 0.0, eval_limit: Optional[int] = None):
        if template != "no":
            raise UserError(f"--prompt-template {template}: the counting task takes only 'no' (a raw continuation)")
        if not 4 <= min_count <= max_count:
            raise UserError(f"counting task: need 4 <= min_count <= max_count, got {min_count}, {max_count}")
        self.truncated_reward = truncated_reward
        rng = random.Random(seed)
        starts = rng.sample(range(low, high - max_count), num_train + num_eval)
        examples = [Example(str(a), str(a + rng.randint(min_count, max_count) - 1)) for a in starts]
        self._train = examples[:num_train]
        self._eval = examples[num_train:][:eval_limit]

    def train_set(self) -> list[Example]:
        return self._train

    def eval_sets(self) -> dict[str, list[Example]]:
        return {"counting": self._eval} if self._eval else {}

    def render(self, example: Example) -> str:
        a = int(example.question)
        return PROMPT.format(a=a, b=example.reference, a1=a + 1, a2=a + 2)

    def score(self, responses: Sequence[str], examples: Sequence[Example], truncated: Sequence[bool]) -> list[float]:
        return [
            self.truncated_reward if cut and self.truncated_reward is not None else count_reward(r, ex)
            for r, ex, cut in zip(responses, examples, truncated)
        ]

    def correctness(self, responses: Sequence[str], examples: Sequence[Example]) -> list[bool]:
        return [count_reward(r, ex) == 1.0 for r, ex in zip(responses, examples)]


def count_reward(response: str, example: Example) -> float:
    """Longest increasing run of expected numbers among the lines, over max(expected, lines)."""
    first, last = int(example.question) + 3, int(example.reference)
    expected = last - first + 1
    lines = [line.strip() for line in response.strip().split("\n") if line.strip()]
    values = [int(line) for line in lines if re.fullmatch(r"\d+", line) and first <= int(line) <= last]
    return longest_increasing(values) / max(expected, len(lines), 1)


def longest_increasing(values: Sequence[int]) -> int:
    """Length of the longest strictly increasing subsequence (patience sorting, O(n log n))."""
    tails: list[int] = []
    for v in values:
        i = bisect.bisect_left(tails, v)
        if i == len(tails):
            tails.append(v)
        else:
            tails[i] = v
    return len(tails)
