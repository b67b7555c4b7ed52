"""Prompts as Oat's data loader carries them: ``(formatted prompt, question, reference)`` strings."""

from __future__ import annotations

import json

from precision_oat.tasks import Example, Task


def prompt_row(task: Task, example: Example) -> tuple[str, str, str]:
    """The row Oat's collector hands the actors; the reference is JSON (it may be a tuple)."""
    reference = list(example.reference) if isinstance(example.reference, tuple) else example.reference
    return task.render(example), example.question, json.dumps(reference)


def decode_reference(text: str):
    """The reference answer of a row, as the task's :class:`Example` holds it."""
    value = json.loads(text)
    return tuple(value) if isinstance(value, list) else value
