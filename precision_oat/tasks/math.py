"""The math reasoning workload: MATH-style questions, a boxed final answer, a 0/1 reward.

Train set: the paper's sanity-test set (1,460 MATH problems that R1-Distill-Qwen-1.5B solves
20-80% of the time). Eval sets: AIME 2024, AMC 2023, MATH-500, Minerva, OlympiadBench.
The oracle is :mod:`precision_oat.tasks.grading` (math-verify under a hard timeout, :mod:`~precision_oat.tasks.grading_pool`).
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

from precision_oat.tasks import grading, grading_pool
from precision_oat.tasks.data import DEFAULT_EVAL_SUITE, DEFAULT_TRAIN, load_eval_suite, load_examples
from precision_oat.tasks.task import DEFAULT_GRADING_TIMEOUT_S as DEFAULT_TIMEOUT_S
from precision_oat.tasks.task import Example, Task
from precision_oat.tasks.templates import apply_template, check_template


def grade(
    response: str, reference: str | Sequence[str], template: Optional[str] = None, timeout_s: float = DEFAULT_TIMEOUT_S
) -> bool:
    """Whether ``response``'s final answer matches ``reference`` (any of them, if several)."""
    correct, _ = MathGrader(template=template, timeout_s=timeout_s).judge_batch([response], [reference])
    return correct[0]


class MathGrader:
    """Batch grading into rewards, with counts of what went wrong.

    ``truncated_reward`` is the reward of a response cut at the length limit (whatever its
    answer); None grades truncated responses like the others.
    """

    def __init__(
        self,
        template: Optional[str] = None,
        correct_reward: float = 1.0,
        incorrect_reward: float = 0.0,
        truncated_reward: Optional[float] = 0.0,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        num_workers: Optional[int] = None,
        require_think: Optional[bool] = None,
    ):
        self.template = template
        self.correct_reward = correct_reward
        self.incorrect_reward = incorrect_reward
        self.truncated_reward = truncated_reward
        self.timeout_s = timeout_s
        self.num_workers = num_workers
        self.require_think = require_think

    def judge_batch(
        self, responses: Sequence[str], references: Sequence[str | Sequence[str]]
    ) -> tuple[list[bool], dict[str, int]]:
        """Correctness of each response; info counts ``no_answer``, ``unparsable``, ``timeouts``, ``errors``."""
        if len(responses) != len(references):
            raise ValueError(f"{len(responses)} responses but {len(references)} references")
        correct = [False] * len(responses)
        info = {"no_answer": 0, "unparsable": 0, "timeouts": 0, "errors": 0}
        jobs, slots = [], []
        for i, (response, reference) in enumerate(zip(responses, references)):
            answer = grading.extract_answer(response, self.template, require_think=self.require_think)
            if answer is None:
                info["no_answer"] += 1
                continue
            refs = grading.reference_answers(reference)
            if any(grading.strings_equal(answer, r) for r in refs):
                correct[i] = True
                continue
            jobs.append((answer, refs))
            slots.append(i)
        if jobs:
            verdicts = grading_pool.judge_many(jobs, self.timeout_s, self.num_workers)
            for i, verdict in zip(slots, verdicts):
                correct[i] = verdict == "correct"
                key = {"unparsable": "unparsable", "timeout": "timeouts", "error": "errors"}.get(verdict)
                if key:
                    info[key] += 1
        return correct, info

    def grade_batch(
        self,
        responses: Sequence[str],
        references: Sequence[str | Sequence[str]],
        truncated: Optional[Sequence[bool]] = None,
    ) -> tuple[list[float], dict[str, int]]:
        """One reward per response, and counts (those of :meth:`judge_batch` plus ``truncated``, ``correct``)."""
        truncated = list(truncated) if truncated is not None else [False] * len(responses)
        if len(truncated) != len(responses):
            raise ValueError(f"{len(responses)} responses but {len(truncated)} truncation flags")
        # A response whose reward its truncation fixes is not judged.
        graded = [i for i, cut in enumerate(truncated) if not (cut and self.truncated_reward is not None)]
        judged, info = self.judge_batch([responses[i] for i in graded], [references[i] for i in graded])
        correct = [False] * len(responses)
        for i, ok in zip(graded, judged):
            correct[i] = ok
        info["truncated"] = sum(bool(t) for t in truncated)
        info["correct"] = sum(judged)
        return self.rewards(correct, truncated), info

    def rewards(self, correct: Sequence[bool], truncated: Sequence[bool]) -> list[float]:
        """The reward of each response from whether it is right and whether it was cut at the length limit."""
        return [float(self.truncated_reward) if cut and self.truncated_reward is not None
                else self.correct_reward if ok else self.incorrect_reward for ok, cut in zip(correct, truncated)]


class MathTask(Task):
    """Math questions with a boxed final answer, graded by math-verify."""

    name = "math"

    def __init__(
        self,
        train_path: str = DEFAULT_TRAIN,
        train_split: Optional[str] = "train",
        eval_path: Optional[str] = DEFAULT_EVAL_SUITE,
        eval_benchmarks: Optional[list[str]] = None,
        input_key: str = "problem",
        output_key: str = "answer",
        template: str = "no",
        tokenizer: Any = None,
        train_limit: Optional[int] = None,
        eval_limit: Optional[int] = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        correct_reward: float = 1.0,
        incorrect_reward: float = 0.0,
        truncated_reward: Optional[float] = 0.0,
        num_workers: Optional[int] = None,
    ):
        check_template(template)
        self.train_path, self.train_split = train_path, train_split
        self.eval_path, self.eval_benchmarks = eval_path, eval_benchmarks
        self.input_key, self.output_key = input_key, output_key
        self.template, self.tokenizer = template, tokenizer
        # The R1-Zero conversation's answer ends the response, as the paper's reference sampler stops it.
        self.stop_strings = ("</answer>",) if template == "r1" else ()
        self.train_limit, self.eval_limit = train_limit, eval_limit
        self.grader = MathGrader(
            template=template,
            correct_reward=correct_reward,
            incorrect_reward=incorrect_reward,
            truncated_reward=truncated_reward,
            timeout_s=timeout_s,
            num_workers=num_workers,
        )
        # Counts from the latest score() call, for logging.
        self.last_info: dict[str, int] = {}
        self._train: Optional[list[Example]] = None
        self._eval: Optional[dict[str, list[Example]]] = None

    def train_set(self) -> list[Example]:
        if self._train is None:
            self._train = load_examples(
                self.train_path,
                split=self.train_split,
                input_key=self.input_key,
                output_key=self.output_key,
                limit=self.train_limit,
            )
        return self._train

    def eval_sets(self) -> dict[str, list[Example]]:
        if self.eval_path is None:
            return {}
        if self._eval is None:
            self._eval = load_eval_suite(
                self.eval_path, self.eval_benchmarks, self.input_key, self.output_key, limit=self.eval_limit
            )
        return self._eval

    def render(self, example: Example) -> str:
        return apply_template(self.template, example.question, self.tokenizer)

    def rewards(self, responses: Sequence[str], examples: Sequence[Example], truncated: Sequence[bool]) -> list[float]:
        rewards, self.last_info = self.grader.grade_batch(responses, [e.reference for e in examples], truncated)
        return rewards

    def correctness(self, responses: Sequence[str], examples: Sequence[Example]) -> list[bool]:
        """Whether each response is right, ignoring truncation (for evaluation)."""
        correct, _ = self.grader.judge_batch(responses, [e.reference for e in examples])
        return correct

    def grade(self, responses: Sequence[str], examples: Sequence[Example],
              truncated: Sequence[bool]) -> tuple[list[bool], list[float]]:
        correct = self.correctness(responses, examples)  # judged once, for both
        return correct, self.grader.rewards(correct, truncated)
