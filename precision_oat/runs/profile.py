"""Where one learner update spends its time, by operator (``--profile-update STEP``, the scale ladder's ``--profile``).

The update runs once under torch's profiler. Each operator is charged the device time of the kernels
it launched itself (CPU time on CPU), so the shares add up to the update's whole device time and no
kernel counts twice. Beside them: the update's wall time, so what the device spent idle is their
difference, and the operators and runtime calls the host spent the most of its own time in (on a GPU,
a call that waits for the device, such as a copy to the host, counts the wait).
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import Iterator

import torch

from precision_oat.runs.folder import write_json


@contextlib.contextmanager
def operator_profile(device: torch.device, most: int = 25) -> Iterator[dict]:
    """Profile the block; the dict it yields is filled once the block ends:

    operators           the ``most`` operators that took the most device time (CPU time on CPU), each
                        ``[name, calls, ms, share of the total]``
    profiled_wall_ms    the block's wall time, the device synchronised at both ends
    profiled_device_ms  the device time of all its operators (CPU time on CPU)
    host_operators      the ``most`` operators and runtime calls that took the most of the host's own time,
                        each ``[name, calls, ms]``
    """
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    cuda = device.type == "cuda"
    found: dict = {}
    with profile(activities=[ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])) as prof:
        if cuda:
            torch.cuda.synchronize(device)
        start = time.perf_counter()
        yield found
        if cuda:
            torch.cuda.synchronize(device)
        wall = time.perf_counter() - start
    # The operators only: their kernels are listed too, and would count twice.
    events = [e for e in prof.key_averages() if e.device_type == DeviceType.CPU]
    own = (lambda e: e.self_device_time_total) if cuda else (lambda e: e.self_cpu_time_total)
    by_device = sorted(events, key=own, reverse=True)
    total = sum(own(e) for e in events)
    by_host = sorted(events, key=lambda e: e.self_cpu_time_total, reverse=True)
    found.update({
        "operators": [[e.key, e.count, round(own(e) / 1000, 3), round(own(e) / (total or 1.0), 4)]
                      for e in by_device[:most]],
        "profiled_wall_ms": round(wall * 1000, 3),
        "profiled_device_ms": round(total / 1000, 3),
        "host_operators": [[e.key, e.count, round(e.self_cpu_time_total / 1000, 3)] for e in by_host[:most]],
    })


def report_profile(out: Path, step: int, found: dict, shown: int = 8) -> None:
    """``profile.json`` in the run folder, and the costliest operators on the console."""
    write_json(out / "profile.json", {"step": step, **found})
    lines = "\n".join(f"  {share:6.1%}  {ms:10.1f} ms  {calls:6d} ×  {name}"
                      for name, calls, ms, share in found["operators"][:shown])
    print(f"profile of step {step}'s update ({out / 'profile.json'}): {found['profiled_wall_ms']:.0f} ms, "
          f"{found['profiled_device_ms']:.0f} ms of it in operators\n{lines}", flush=True)
