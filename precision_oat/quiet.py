"""Harmless third-party output, silenced narrowly: only around the calls that print it, and only that output.

- transformers draws a progress bar for every model it loads ("Loading weights") or saves
  ("Writing model shards"): one bar per checkpoint, in a run's log, says nothing.
- ``save_pretrained`` imports DeepSpeed whenever it is installed (accelerate's ``unwrap_model``
  checks for a ``DeepSpeedEngine``), and on a machine without a GPU DeepSpeed's import warns
  "Setting accelerator to CPU", although a built-in run never uses DeepSpeed.
- peft's ``get_peft_model`` reads transformers' deprecated ``is_gradient_checkpointing``, whose
  FutureWarning names neither our code nor anything a user can change.
"""

from __future__ import annotations

import logging
import warnings
from contextlib import contextmanager
from typing import Iterator

# The logger DeepSpeed warns through, and the start of the warning it gives on import without a GPU.
DEEPSPEED_LOGGER = "DeepSpeed"
DEEPSPEED_CPU_NOTICE = "Setting accelerator to CPU"


@contextmanager
def no_transformers_progress_bars() -> Iterator[None]:
    """transformers draws no progress bar inside the block; outside it, as it was before."""
    from transformers.utils import logging as hf_logging

    was_enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_enabled:
            hf_logging.enable_progress_bar()


class _DropDeepSpeedCpuNotice(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith(DEEPSPEED_CPU_NOTICE)


@contextmanager
def no_deepspeed_cpu_notice() -> Iterator[None]:
    """DeepSpeed's "Setting accelerator to CPU" warning is dropped inside the block (its other messages are kept)."""
    notice = _DropDeepSpeedCpuNotice()
    logger = logging.getLogger(DEEPSPEED_LOGGER)
    logger.addFilter(notice)
    try:
        yield
    finally:
        logger.removeFilter(notice)


@contextmanager
def quiet_save() -> Iterator[None]:
    """Around ``save_pretrained``: neither its progress bar nor the DeepSpeed import's CPU notice."""
    with no_transformers_progress_bars(), no_deepspeed_cpu_notice():
        yield


@contextmanager
def no_peft_deprecation_notice() -> Iterator[None]:
    """Around ``get_peft_model``: transformers' FutureWarning on ``is_gradient_checkpointing`` is dropped."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing", category=FutureWarning)
        yield
