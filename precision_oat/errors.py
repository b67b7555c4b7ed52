"""The one exception type for bad input.

Everything a user can get wrong (a flag, a preset, a data file, a missing optional stack)
raises :class:`UserError` with one line that names the input and the fix. The command-line
entry points print exactly that line and exit non-zero; any other exception is a bug and
keeps its traceback.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator


class UserError(ValueError):
    """Bad input: the message names the input, the value and what to do instead."""


class NonFiniteWeights(UserError):
    """An optimiser step left a weight inf or NaN; the run stops before it can be checkpointed."""


# The flags that trade memory for speed, named by every out-of-memory message.
LEARNER_MEMORY_FLAGS = ("lower --micro-batch-size or set --micro-batch-tokens, add --gradient-checkpointing, "
                        "lower --max-new-tokens, or leave the learner more room with a lower "
                        "--vllm-gpu-memory-utilization")
SAMPLER_MEMORY_FLAGS = ("lower --vllm-gpu-memory-utilization (or --max-new-tokens, which sizes its context), "
                        "or free the GPU of other processes")
SAMPLER_WAKE_MEMORY_FLAGS = ("size vLLM's KV cache to a step with --vllm-kv-cache-gb, or lower "
                             "--vllm-gpu-memory-utilization: the learner's weights, gradients and optimiser state stay "
                             "on the GPU while vLLM is awake")
# How vLLM's sleep-mode allocator reports a failed allocation (a RuntimeError, not torch's OutOfMemoryError).
VLLM_OUT_OF_MEMORY = "CUDA Error: out of memory"


@contextmanager
def out_of_memory_explained(where: str, fixes: str) -> Iterator[None]:
    """Turn a CUDA out-of-memory error inside the block into one :class:`UserError` line naming the flags to lower.

    The original error stays attached as the cause (``raise … from``), with its allocator report.
    vLLM's own allocator says only that it failed, so its line gets the device's memory instead.
    """
    import torch

    try:
        yield
    except torch.cuda.OutOfMemoryError as e:
        first_line = (str(e).splitlines() or [""])[0]
        raise UserError(f"out of GPU memory in {where} ({first_line.split('. Including')[0]}): {fixes}") from e
    except RuntimeError as e:
        if VLLM_OUT_OF_MEMORY not in str(e):
            raise
        raise UserError(f"out of GPU memory in {where} ({device_memory()}): {fixes}") from e


def device_memory() -> str:
    """The current CUDA device's free memory and what this process's tensors hold, in words."""
    import torch

    if not torch.cuda.is_available():
        return "no CUDA device to report on"
    free, total = torch.cuda.mem_get_info()
    allocated, reserved = torch.cuda.memory_allocated(), torch.cuda.memory_reserved()
    gib = 2**30
    return (f"{free / gib:.1f} of {total / gib:.1f} GiB free; this process's tensors hold {allocated / gib:.1f} GiB "
            f"and its allocator caches {(reserved - allocated) / gib:.1f} GiB more")
