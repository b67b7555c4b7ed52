"""A verifiable task: prompts with reference answers, and a reward for each response."""

from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import Sequence

# Seconds one response may take to grade before it counts as incorrect.
DEFAULT_GRADING_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class Example:
    # The question as the dataset states it, before any prompt template.
    question: str
    # The reference answer the reward compares against; a tuple when several are accepted.
    reference: str | tuple[str, ...]


class Task(abc.ABC):
    """Owns the data, the prompt template and the oracle of one workload."""

    name: str
    # Texts that end a response (sampled on, then cut after the first: samplers/stop_strings.py).
    stop_strings: tuple[str, ...] = ()

    @abc.abstractmethod
    def train_set(self) -> list[Example]:
        """Examples that prompts are drawn from during training."""

    def eval_sets(self) -> dict[str, list[Example]]:
        """Named benchmarks for evaluation; empty when the task has none."""
        return {}

    @abc.abstractmethod
    def render(self, example: Example) -> str:
        """The prompt text the policy sees (template applied)."""

    @abc.abstractmethod
    def rewards(self, responses: Sequence[str], examples: Sequence[Example], truncated: Sequence[bool]) -> list[float]:
        """One reward per response. ``truncated`` marks responses cut at the length limit."""

    def check_response_limit(self, tokenizer, max_new_tokens: int) -> None:
        """Refuse a ``--max-new-tokens`` below every right answer; only tasks that know their answers can tell."""

    def correctness(self, responses: Sequence[str], examples: Sequence[Example]) -> list[bool]:
        """Whether each response is right, whatever its length (for evaluation)."""
        return [r > 0 for r in self.rewards(responses, examples, [False] * len(responses))]

    def grade(self, responses: Sequence[str], examples: Sequence[Example],
              truncated: Sequence[bool]) -> tuple[list[bool], list[float]]:
        """Evaluation's two grades of each response: :meth:`correctness` and the reward :meth:`rewards` gives."""
        return self.correctness(responses, examples), self.rewards(responses, examples, truncated)
