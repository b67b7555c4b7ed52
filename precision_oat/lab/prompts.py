"""Where the lab and the preflight take their model and prompts from (the same flags for both)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Optional

from precision_oat import checks
from precision_oat.errors import UserError


@dataclass
class PromptSource:
    # HF model id or local folder; None uses the embedded tiny arithmetic policy.
    model: Optional[str] = None
    # GGUF file inside --model to load (dequantised), e.g. SmolLM2-135M-Instruct.Q4_1.gguf.
    gguf_file: Optional[str] = None
    # Built-in task whose training prompts are used when --prompt-data is not given: "arithmetic"
    # (short sums) or "counting" (the long answers of the RL runs with --task counting).
    task: Literal["arithmetic", "counting"] = "arithmetic"
    # Prompt file or datasets folder (.jsonl/.parquet/save_to_disk); None uses the --task's prompts.
    prompt_data: Optional[str] = None
    # Column of --prompt-data holding the prompt.
    input_key: str = "problem"
    # Split of --prompt-data when it is a DatasetDict.
    split: str = "train"
    # Template applied to --prompt-data questions (precision_oat.tasks.templates), or "chat".
    prompt_template: str = "no"
    # Largest operand of the arithmetic prompts (when --prompt-data is not given).
    max_operand: int = 49
    # Prompts to use (the first of --prompt-data, or of the --task).
    num_prompts: int = 32


def check_prompt_source(source: PromptSource) -> None:
    """Refuse a --task that cannot give prompts with these flags, a count of prompts below 1 and a negative
    --max-operand, before anything is loaded."""
    checks.integer(source, "num_prompts", 1)
    checks.integer(source, "max_operand", 0, why="the arithmetic prompts add two numbers from 0 to it")
    if source.task == "arithmetic":
        return
    if source.prompt_data is not None:
        raise UserError(f"--task {source.task} --prompt-data {source.prompt_data}: the task makes its own prompts; "
                        "drop one of the two")
    if source.model is None:
        raise UserError(f"--task {source.task}: the embedded policy (no --model) reads digits and arithmetic signs "
                        "only; give --model <HF folder>")


def load_prompts(source: PromptSource, tokenizer) -> list[str]:
    """The prompt texts: the first ``num_prompts`` of --prompt-data, or of the --task's training prompts."""
    check_prompt_source(source)
    if source.prompt_data is None:
        return task_prompts(source)
    from precision_oat.tasks.data import load_examples
    from precision_oat.tasks.templates import apply_template

    # No reference answers are needed, so the prompt column also serves as the answer column.
    examples = load_examples(source.prompt_data, split=source.split, input_key=source.input_key,
                             output_key=source.input_key, limit=source.num_prompts)
    return [apply_template(source.prompt_template, ex.question, tokenizer) for ex in examples]


def task_prompts(source: PromptSource) -> list[str]:
    """The first ``num_prompts`` training prompts of the built-in --task, as the RL run renders them."""
    if source.task == "arithmetic":
        from precision_oat.tasks.arithmetic import ArithmeticTask

        task = ArithmeticTask(max_operand=source.max_operand)
    else:
        from precision_oat.tasks.counting import CountingTask

        task = CountingTask()
    return [task.render(ex) for ex in task.train_set()[: source.num_prompts]]
