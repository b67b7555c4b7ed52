"""One run at a time per folder: an exclusive ``flock`` on ``OUTPUT_DIR/run.lock`` held for the run's life.

The operating system drops the lock when the process ends, however it ends (``kill -9``
included), so a crashed run never leaves a stale lock behind. The file itself stays; it
holds nothing and its presence means nothing.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from typing import Optional

from precision_oat.errors import UserError
from precision_oat.runs.folder import cannot_write, make_output_dir

LOCK_FILE = "run.lock"


class RunLock:
    """The lock of ``folder`` (created if missing), taken at once or refused with :class:`UserError`."""

    def __init__(self, folder: Path):
        self._fd: Optional[int] = None
        self.path = folder / LOCK_FILE
        make_output_dir(folder)
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as e:
            raise cannot_write(folder, e) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise UserError(
                f"--output-dir {folder}: another run is writing there right now (it holds {LOCK_FILE}); "
                "wait for it to end or pass another --output-dir"
            ) from None
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the descriptor drops the lock
            self._fd = None

    __del__ = release

    def __enter__(self) -> "RunLock":
        return self

    def __exit__(self, *exc) -> None:
        self.release()
