"""Ctrl-C and SIGTERM end a run at the next step boundary, after a checkpoint, instead of mid-step."""

from __future__ import annotations

import signal
from typing import Optional


class StopRequest:
    """Inside ``with StopRequest() as stop:``, SIGINT/SIGTERM set :attr:`requested` (a second one interrupts at once).

    Leaving the block in any way, an exception included, gives the caller its own handlers back.
    """

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self):
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
        print(f"\n{self.requested}: stopping after this step (again to stop now)", flush=True)

    def restore(self) -> None:
        for s, handler in self._previous.items():
            signal.signal(s, handler)
