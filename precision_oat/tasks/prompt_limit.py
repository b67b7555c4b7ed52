"""Prompts longer than ``--max-prompt-length``: refused, or with ``--drop-long-prompts`` left out, counted."""

from __future__ import annotations

from typing import Callable, Optional, Sequence

from precision_oat.errors import UserError
from precision_oat.tasks.task import Example, Task


def fit_prompt_limit(examples: Sequence[Example], lengths: Sequence[int], limit: int, drop: bool,
                     what: str = "prompts", log: Callable[[str], None] = print) -> list[Example]:
    """``examples`` whose prompt (``lengths`` tokens) fits ``limit``; a longer one is an error unless ``drop``."""
    too_long = [n for n in lengths if n > limit]
    if too_long and not drop:
        raise UserError(
            f"--max-prompt-length {limit}: {len(too_long)} of {len(lengths)} {what} are longer "
            f"(longest {max(too_long)} tokens); raise the limit, filter the data or pass --drop-long-prompts"
        )
    kept = [e for e, n in zip(examples, lengths) if n <= limit]
    if too_long and not kept:
        raise UserError(f"--max-prompt-length {limit}: all {len(lengths)} {what} are longer "
                        f"(shortest {min(too_long)} tokens); raise the limit")
    if too_long:
        log(f"--drop-long-prompts: left out {len(too_long)} of {len(lengths)} {what} longer than "
            f"--max-prompt-length {limit} tokens (longest {max(too_long)})")
    return kept


class PromptLimit(Task):
    """``task`` whose training and evaluation sets are held to the prompt limit, each set checked once.

    Everything but the sets is the wrapped task's own.
    """

    def __init__(self, task: Task, count_tokens: Callable[[Example], int], limit: int, drop: bool = False,
                 log: Callable[[str], None] = print):
        self.task, self.count_tokens, self.limit, self.drop, self.log = task, count_tokens, limit, drop, log
        self.name, self.stop_strings = task.name, task.stop_strings
        self._train: Optional[list[Example]] = None
        self._eval: Optional[dict[str, list[Example]]] = None

    def train_set(self) -> list[Example]:
        if self._train is None:
            examples = self.task.train_set()
            if not examples:
                raise UserError("the task has no training examples")
            self._train = self._fit(examples, "training prompts")
        return self._train

    def eval_sets(self) -> dict[str, list[Example]]:
        if self._eval is None:
            self._eval = {name: self._fit(examples, f"{name} evaluation prompts")
                          for name, examples in self.task.eval_sets().items()}
        return self._eval

    def _fit(self, examples: list[Example], what: str) -> list[Example]:
        return fit_prompt_limit(examples, [self.count_tokens(e) for e in examples], self.limit, self.drop, what,
                                self.log)

    def render(self, example: Example) -> str:
        return self.task.render(example)

    def rewards(self, responses, examples, truncated) -> list[float]:
        return self.task.rewards(responses, examples, truncated)

    def check_response_limit(self, tokenizer, max_new_tokens: int) -> None:
        self.task.check_response_limit(tokenizer, max_new_tokens)

    def correctness(self, responses, examples) -> list[bool]:
        return self.task.correctness(responses, examples)

    def grade(self, responses, examples, truncated) -> tuple[list[bool], list[float]]:
        return self.task.grade(responses, examples, truncated)

    def __getattr__(self, name: str):
        # A task's own extras (MathTask's grading settings, say); only reached for names not found above.
        if name == "task":  # not set yet (a copy being built): no wrapped task to ask
            raise AttributeError(name)
        return getattr(self.task, name)
