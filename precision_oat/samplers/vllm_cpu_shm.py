"""The shared-memory segments of a vLLM engine over several CPU ranks, named once and then unnamed.

vLLM's CPU engines exchange tensors between the ranks of one engine through POSIX shared memory,
one segment per rank, named after the launcher's init method. Under ``torchrun`` that method is
``env://`` for every run, so every run on a machine uses the same names, and the names are removed
only by the interpreter's teardown: after a process that skipped it (a finished run's ``os._exit``
with a gloo group, a ``kill -9``) the next engine fails with "create shm in SHMManager failed.
errno: 17". Once an engine has started, every rank has opened every segment, so the names can go:
the memory stays mapped until the processes end, and nothing is left behind for the next run.
"""

from __future__ import annotations

import os
from pathlib import Path

SHM_FOLDER = Path("/dev/shm")
# vLLM's error when a segment's name is taken.
NAME_TAKEN = "create shm in SHMManager failed"


def unlink_segment_names() -> None:
    """Remove the names of this engine's segments (every rank's; a name another rank removed first is skipped)."""
    from vllm.distributed.parallel_state import get_tp_group

    group_name = getattr(getattr(get_tp_group().device_communicator, "dist_module", None), "group_name", None)
    if group_name is None:  # one rank per engine, or vLLM's torch.distributed fallback: no segments
        return
    prefix = group_name.lstrip("/") + "_"
    for name in os.listdir(SHM_FOLDER):
        if name.startswith(prefix):
            (SHM_FOLDER / name).unlink(missing_ok=True)


def name_taken_hint(error: Exception) -> str:
    """A sentence for vLLM's error when a segment's name is taken; empty for any other error."""
    if NAME_TAKEN not in str(error):
        return ""
    return (f" (a run that ended without vLLM's teardown left its shared memory: remove the {SHM_FOLDER}/*cpushm_* "
            "files when no vLLM run is going on this machine)")
