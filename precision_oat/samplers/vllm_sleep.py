"""vLLM's sleep mode around the learner's update: the engine's GPU memory released, then woken for the next push.

Level 2 (weights and KV cache released, not offloaded): the weights are replaced after every update
anyway, so offloading them to the host (level 1) would copy them twice for nothing. A push wakes the
weights, loads them, then wakes the KV cache, so the two never need room at once beside the learner.
CUDA only; vLLM ignores sleep mode on CPU.
"""

from __future__ import annotations

import contextlib

import torch

from precision_oat.errors import SAMPLER_WAKE_MEMORY_FLAGS, out_of_memory_explained

# Free device memory beyond a sleeping engine's pool, below which its wake-up first empties torch's cache.
WAKE_MARGIN_BYTES = 2**30


class SleepMode:
    """The sleep and wake-up of one engine (a no-op unless ``enabled``)."""

    def __init__(self, llm, device: torch.device, enabled: bool):
        self._llm, self._device, self.enabled = llm, device, enabled
        self.asleep = False

    def sleep(self) -> None:
        if self.enabled and not self.asleep:
            self._llm.sleep(level=2)
            self.asleep = True

    @contextlib.contextmanager
    def woken_for_push(self):
        """The weights awake for the block, then the KV cache (nothing to do for an engine that is awake)."""
        if not self.asleep:
            yield
            return
        from vllm.device_allocator.cumem import CuMemAllocator

        # The wake-up maps back everything in vLLM's sleep-mode pool, as vLLM counts it (free-memory
        # differences would be skewed by other processes allocating on the same GPU).
        needed = CuMemAllocator.get_instance().get_current_usage() + WAKE_MARGIN_BYTES
        if torch.cuda.mem_get_info(self._device)[0] < needed:
            # The learner's cached blocks go back to the device, or the wake-up would not find room. Only
            # then: emptying a large cache costs time here and again in the next update, which re-allocates it.
            torch.cuda.empty_cache()
        self._wake_up("weights")
        yield
        self._wake_up("kv_cache")
        self.asleep = False

    def _wake_up(self, tag: str) -> None:
        with out_of_memory_explained(f"vLLM's wake-up ({tag}) after the update", SAMPLER_WAKE_MEMORY_FLAGS):
            self._llm.wake_up(tags=[tag])
