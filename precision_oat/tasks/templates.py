"""Prompt templates: how a dataset question becomes the text the policy continues.

Each template is a plain function ``question -> prompt``. The formats follow the models
they are named after, since a model only reasons well in the format it was trained on:

- ``r1_distill_qwen``: DeepSeek-R1-Distill chat markup; the prompt opens the ``<think>``
  block, so the response is "reasoning </think> answer with \\boxed{}".
- ``qwen_math``: Qwen2.5-Math ChatML with the step-by-step system prompt.
- ``r1``: the R1-Zero plain-text conversation; the answer goes in ``<answer>`` tags.
- ``qwen3``: Qwen3 ChatML with the instruction in the user turn.
- ``llama3``: Llama-3 instruct header markup.
- ``no``: the question unchanged (for base models or pre-templated data).
- ``chat``: the tokenizer's own chat template (needs a tokenizer), with the boxed instruction.
"""

from __future__ import annotations

from typing import Any, Callable

from precision_oat.errors import UserError

# The instruction every boxed-answer template appends; the grader reads the last \boxed{}.
BOXED_INSTRUCTION = "Please reason step by step, and put your final answer within \\boxed{}."


def r1_distill_qwen(question: str) -> str:
    return f"<｜begin▁of▁sentence｜><｜User｜>{question} {BOXED_INSTRUCTION}\n<｜Assistant｜><think>\n"


def qwen_math(question: str) -> str:
    return (
        f"<|im_start|>system\n{BOXED_INSTRUCTION}<|im_end|>\n"
        f"<|im_start|>user\n{question}<|im_end|>\n"
        "<|im_start|>assistant\n"
    )


def r1(question: str) -> str:
    return (
        "A conversation between User and Assistant. The User asks a question, and the Assistant "
        "solves it. The Assistant first thinks about the reasoning process in the mind and then "
        "provides the User with the answer. The reasoning process is enclosed within <think> "
        "</think> and answer is enclosed within <answer> </answer> tags, respectively, i.e., "
        "<think> reasoning process here </think> <answer> answer here </answer>.\n"
        f"User: {question}\nAssistant: <think>"
    )


def qwen3(question: str) -> str:
    return (
        f"<|im_start|>user\nQuestion: {question}\n{BOXED_INSTRUCTION}<|im_end|>\n"
        "<|im_start|>assistant\n"
    )


def llama3(question: str) -> str:
    return (
        "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n"
        "Cutting Knowledge Date: December 2023\n<|eot_id|>"
        f"<|start_header_id|>user<|end_header_id|>\n\n{question} {BOXED_INSTRUCTION}\n<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n"
    )


def no(question: str) -> str:
    return question


TEMPLATES: dict[str, Callable[[str], str]] = {
    "r1_distill_qwen": r1_distill_qwen,
    "qwen_math": qwen_math,
    "r1": r1,
    "qwen3": qwen3,
    "llama3": llama3,
    "no": no,
}

# Every name :func:`apply_template` accepts.
TEMPLATE_NAMES: tuple[str, ...] = (*TEMPLATES, "chat")


def check_template(name: str) -> None:
    """Raise :class:`UserError` naming the valid templates when ``name`` is not one."""
    if name not in TEMPLATE_NAMES:
        raise UserError(f"--prompt-template {name}: unknown template; valid templates: {', '.join(TEMPLATE_NAMES)}")


def apply_template(name: str, question: str, tokenizer: Any = None) -> str:
    """Render ``question`` with template ``name``; ``chat`` uses ``tokenizer``'s chat template."""
    check_template(name)
    if name != "chat":
        return TEMPLATES[name](question)
    if tokenizer is None or getattr(tokenizer, "chat_template", None) is None:
        raise UserError(
            "--prompt-template chat needs a tokenizer that has a chat template; pick a named template "
            f"({', '.join(TEMPLATES)}) or a --model/--tokenizer that ships one"
        )
    messages = [{"role": "user", "content": f"{question} {BOXED_INSTRUCTION}"}]
    return tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
