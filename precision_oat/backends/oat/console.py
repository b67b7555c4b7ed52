"""What an Oat-backend run prints: the local backend's lines on the console, Oat's own output in ``oat.log``.

Oat's launcher and its launchpad nodes (one process each, started with the launcher's stdout and
stderr) log through loguru, logging, absl, tqdm and print, from Python and from C++ (launchpad,
Plasma), as do DeepSpeed and vLLM inside them. :func:`oat_output_to` points the launcher's file
descriptors 1 and 2 at ``oat.log`` while the program runs, so all of that lands there whichever
library wrote it, without a change to Oat; the launcher's own lines go to the console it yields.
The learner's console lines come through a file that :class:`Relay` copies to that console.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, TextIO

from precision_oat.errors import UserError

# Oat's output, in the output folder.
OAT_LOG = "oat.log"
# How much of oat.log a failed run shows on the console.
TAIL_LINES = 20
# launchpad colours the name of the node before each of its lines.
COLOUR = re.compile(r"\x1b\[[0-9;]*m")


@dataclass
class Console:
    """The launcher's console while Oat's output goes to its log."""

    out: TextIO
    err: TextIO


@contextlib.contextmanager
def oat_output_to(log: Path) -> Iterator[Console]:
    """Inside the block, whatever this process and the processes it starts write to stdout and stderr goes
    to ``log``; the yielded :class:`Console` writes where they went before. A failure other than a
    :class:`UserError` shows the last lines of ``log`` and its path on stderr, then propagates."""
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    saved = os.dup(1), os.dup(2)
    console = Console(*(os.fdopen(os.dup(fd), "w", buffering=1, encoding=stream.encoding, errors="replace")
                        for fd, stream in zip(saved, (sys.stdout, sys.stderr))))
    # Appending, as several processes write to it; a new run's log starts empty.
    target = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
    os.dup2(target, 1)
    os.dup2(target, 2)
    os.close(target)
    failure = None
    try:
        yield console
    except Exception as error:
        failure = error
        raise
    finally:
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        for fd, original in zip((1, 2), saved):
            os.dup2(original, fd)
            os.close(original)
        console.out.close()
        console.err.close()
        if failure is not None and not isinstance(failure, UserError):
            print(f"the Oat program failed; the last lines of {log}:\n{tail(log, TAIL_LINES)}", file=sys.stderr,
                  flush=True)


def tail(path: Path, lines: int) -> str:
    """The last ``lines`` lines of ``path``, without terminal colours."""
    text = COLOUR.sub("", path.read_text(encoding="utf-8", errors="replace"))
    return "\n".join(text.splitlines()[-lines:])


class Relay:
    """While active, copies each line written to ``path`` to ``stream`` (polling every ``interval`` seconds);
    on exit, the lines written until then, and removes ``path`` (a channel, not an output)."""

    def __init__(self, path: Path, stream: TextIO, interval: float = 0.2):
        self.path, self.stream, self.interval = path, stream, interval
        self.offset = 0
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._follow, daemon=True)

    def __enter__(self) -> "Relay":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stopped.set()
        self.thread.join()
        self.copy_new_lines()
        self.path.unlink(missing_ok=True)

    def _follow(self) -> None:
        while not self.stopped.wait(self.interval):
            self.copy_new_lines()

    def copy_new_lines(self) -> None:
        if not self.path.is_file():
            return
        with self.path.open("rb") as f:
            f.seek(self.offset)
            data = f.read()
        # A line still being written waits for the next look.
        complete = data[: data.rfind(b"\n") + 1]
        if complete:
            self.offset += len(complete)
            self.stream.write(complete.decode("utf-8", errors="replace"))
            self.stream.flush()
