"""Where one learner update spends its time, by operator (``--profile-update STEP``, the scale ladder's ``--profile``).

The update runs once under torch's profiler. Each operator is charged the device time of the kernels
it launched itself (CPU time on CPU), so the shares add up to the update's whole device time and no
kernel counts twice.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Iterator

import torch

from precision_oat.runs.folder import write_json


@contextlib.contextmanager
def operator_profile(device: torch.device, most: int = 25) -> Iterator[list[list]]:
    """Profile the block; the list it yields is filled, once the block ends, with the ``most`` operators that took
    the most time, each ``[name, calls, ms, share of the total]``."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    cuda = device.type == "cuda"
    operators: list[list] = []
    with profile(activities=[ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])) as prof:
        yield operators
        if cuda:
            torch.cuda.synchronize(device)
    own = (lambda e: e.self_device_time_total) if cuda else (lambda e: e.self_cpu_time_total)
    # The operators only: their kernels are listed too, and would count twice.
    events = sorted((e for e in prof.key_averages() if e.device_type == DeviceType.CPU), key=own, reverse=True)
    total = sum(own(e) for e in events) or 1.0
    operators += [[e.key, e.count, round(own(e) / 1000, 3), round(own(e) / total, 4)] for e in events[:most]]


def report_profile(out: Path, step: int, operators: list[list], shown: int = 8) -> None:
    """``profile.json`` in the run folder, and the costliest operators on the console."""
    write_json(out / "profile.json", {"step": step, "operators": operators})
    lines = "\n".join(f"  {share:6.1%}  {ms:10.1f} ms  {calls:6d} ×  {name}" for name, calls, ms, share in operators[:shown])
    print(f"profile of step {step}'s update ({out / 'profile.json'}):\n{lines}", flush=True)
