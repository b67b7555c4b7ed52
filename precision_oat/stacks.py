"""The optional stacks (Oat, vLLM, DeepSpeed): whether this Python has them, and how to get them.

Probes use :func:`importlib.util.find_spec`, which locates a package without importing
it, so asking is cheap and ``import precision_oat`` never pulls a stack in. Engines call
:func:`require` before their first import of a stack, so a missing one is one line naming
the flag that needs it and the command that installs it, not ``No module named …``.
"""

from __future__ import annotations

import importlib.util
import sys
from dataclasses import dataclass

from precision_oat.errors import UserError


@dataclass(frozen=True)
class Stack:
    # The name users know it by.
    name: str
    # Top-level packages it needs, in the order a reader would install them.
    modules: tuple[str, ...]
    # The flag that asks for it.
    needed_by: str
    # How to get it.
    install: str
    # What to pass instead, to do without it.
    instead: str = ""


STACKS: dict[str, Stack] = {
    "oat": Stack(
        "the Oat stack",
        ("oat", "launchpad", "deepspeed", "vllm"),
        "--backend oat",
        "run `bash scripts/oat_env.sh`, which builds the Python 3.10 venv with Oat, launchpad, DeepSpeed and vLLM "
        "pinned, and start the run with that venv's python",
    ),
    "vllm": Stack(
        "vLLM",
        ("vllm",),
        "--sampler vllm",
        'pip install -e ".[vllm]" on a CUDA machine, or `bash scripts/vllm_env.sh` for the CPU build',
        "--sampler builtin",
    ),
    "deepspeed": Stack(
        "DeepSpeed",
        ("deepspeed",),
        "--learner deepspeed",
        'pip install -e ".[deepspeed]"',
        "--learner builtin",
    ),
}
# The one environment with both vLLM and DeepSpeed.
VLLM_WITH_DEEPSPEED = ('pip install -e ".[vllm,deepspeed]" on a CUDA machine gives both (the CPU venv of '
                       "`bash scripts/vllm_env.sh` has vLLM but no DeepSpeed, `make setup`'s .venv DeepSpeed but no vLLM)")


def missing(stack: str) -> list[str]:
    """The packages of ``stack`` this Python cannot import."""
    return [m for m in STACKS[stack].modules if importlib.util.find_spec(m) is None]


def is_available(stack: str) -> bool:
    """True when every package of ``stack`` is installed (none is imported)."""
    return not missing(stack)


def require(stack: str) -> None:
    """Raise :class:`UserError` naming the flag and the install command when ``stack`` is not installed."""
    absent = missing(stack)
    if absent:
        s = STACKS[stack]
        instead = f"; or use {s.instead}" if s.instead else ""
        raise UserError(f"{s.needed_by} needs {s.name}, but this {_python()} environment lacks {', '.join(absent)}; "
                        f"{s.install}{instead}")


def require_all(flags: dict[str, tuple[str, str]]) -> None:
    """:func:`require` for several stacks at once, in one line.

    ``flags`` maps each stack to the caller's own flag that asks for it and the flag that does
    without it. vLLM with DeepSpeed names the one environment that has both.
    """
    absent = {stack: missing(stack) for stack in flags if missing(stack)}
    if not absent:
        return
    names = " and ".join(STACKS[stack].name for stack in flags)
    if set(flags) == {"vllm", "deepspeed"}:
        install = VLLM_WITH_DEEPSPEED
    else:
        install = "; ".join(STACKS[stack].install for stack in absent)
    asked = " ".join(flag for flag, _ in flags.values())
    instead = " ".join(flags[stack][1] for stack in absent)
    raise UserError(f"{asked} needs {names}, but this {_python()} environment lacks "
                    f"{', '.join(m for ms in absent.values() for m in ms)}; {install}; or use {instead}")


def _python() -> str:
    return f"Python {sys.version_info.major}.{sys.version_info.minor}"
