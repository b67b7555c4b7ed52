"""Ctrl-C and SIGTERM end a run at the next step boundary, after a checkpoint, instead of mid-step."""

from __future__ import annotations

import signal
from typing import Optional


class StopRequest:
    """Inside ``with StopRequest() as stop:``, SIGINT/SIGTERM set :attr:`requested` (a second one interrupts at once).

    Leaving the block in any way, an exception included, gives the caller its own handlers back.
    """

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self, ranks: int = 1):
        # Under a launcher a signal also comes when another rank has died (torchrun's agent then ends the rest),
        # and a step that needs the dead rank never ends: the line says what to do then.
        self.ranks = ranks
        self.requested: Optional[str] = None
        self.signal_number = 0
        self._previous = {}

    def __enter__(self) -> "StopRequest":
        self._previous = {s: signal.signal(s, self._handle) for s in self.SIGNALS}
        return self

    def __exit__(self, *exc) -> None:
        self.restore()

    def _handle(self, number, frame):
        if self.requested is not None:
            self.restore()
            signal.raise_signal(number)
            return
        self.requested = signal.Signals(number).name
        self.signal_number = number
        line = f"\n{self.requested}: stopping after this step (again to stop now)"
        if self.ranks > 1:
            line += ("; if another rank has stopped, this one cannot end its step and the launcher ends it: "
                     "--resume then goes on from the last checkpoint")
        print(line, flush=True)

    def restore(self) -> None:
        for s, handler in self._previous.items():
            signal.signal(s, handler)
