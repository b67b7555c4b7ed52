"""Verifiable tasks: data, prompt template and reward of one workload."""

from __future__ import annotations

from precision_oat.errors import UserError
from precision_oat.tasks.task import Example, Task

__all__ = ["Example", "Task", "build_task"]


def build_task(task, evaluation, tokenizer=None) -> Task:
    """The task named by ``--task``, from :class:`~precision_oat.args.TaskArgs` and :class:`~precision_oat.args.EvalArgs`."""
    t = task
    # The task's own default template unless the flag names one.
    template = {"template": t.prompt_template} if t.prompt_template is not None else {}
    if t.task == "arithmetic":
        from precision_oat.tasks.arithmetic import ArithmeticTask

        if t.prompt_data is not None:
            raise UserError("--prompt-data applies to --task math; the arithmetic task makes its own prompts")
        sizes = {"num_train": t.max_train} if t.max_train else {}
        sizes.update({"num_eval": evaluation.eval_limit} if evaluation.eval_limit else {})
        return ArithmeticTask(max_operand=t.max_operand, tokenizer=tokenizer, **sizes, **template)
    if t.task == "counting":
        from precision_oat.tasks.counting import CountingTask

        if t.prompt_data is not None:
            raise UserError("--prompt-data applies to --task math; the counting task makes its own prompts")
        sizes = {"num_train": t.max_train} if t.max_train else {}
        return CountingTask(min_count=t.count_lengths[0], max_count=t.count_lengths[1], truncated_reward=t.truncated_reward,
                            eval_limit=evaluation.eval_limit, **sizes, **template)
    from precision_oat.tasks.math import DEFAULT_EVAL_SUITE, DEFAULT_TRAIN, MathTask

    e = evaluation
    return MathTask(
        train_path=t.prompt_data or DEFAULT_TRAIN,
        train_split=t.train_split,
        eval_path=e.eval_data or DEFAULT_EVAL_SUITE,
        eval_benchmarks=list(e.eval_benchmarks) if e.eval_benchmarks else None,
        input_key=t.input_key,
        output_key=t.output_key,
        tokenizer=tokenizer,
        train_limit=t.max_train,
        eval_limit=e.eval_limit,
        timeout_s=t.grading_timeout,
        truncated_reward=t.truncated_reward,
        **template,
    )
