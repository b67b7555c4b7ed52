"""Math-verify in worker processes under a hard timeout: :func:`judge_many` grades a batch.

math-verify can hang on adversarial input and its own timeout uses ``signal.alarm``, which only
works in a main thread, so every comparison that :func:`~precision_oat.tasks.grading.exact_verdict`
does not decide runs in a worker process with the timeout enforced from outside: a worker that
overruns is killed and replaced. A timed-out, unparsable or crashed comparison grades as incorrect
and is counted. Workers are plain interpreters running :mod:`precision_oat.tasks.grading_worker`
(not multiprocessing children), so they never import the caller's main module: grading works from a
script without a ``if __name__ == "__main__":`` guard, from ``python -`` and from a notebook alike.
"""

from __future__ import annotations

import atexit
import json
import os
import queue
import subprocess
import sys
import threading
import time
from collections import deque
from pathlib import Path
from typing import Optional, Sequence

from precision_oat.tasks.grading import Verdict, exact_verdict

# Seconds a new worker may take to import math-verify and report ready.
_START_TIMEOUT_S = 300.0
# Longest single wait for a reply, in seconds.
_POLL_S = 0.25
# The folder that holds the precision_oat package, for workers of an uninstalled checkout.
_PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])
# A worker's command line: drop the current directory from sys.path (it is the caller's, and
# may shadow modules), reach this very package, and serve.
_WORKER_BOOT = (
    "import sys; root = sys.argv[1]; sys.path[:] = [p for p in sys.path if p != '']; "
    "root in sys.path or sys.path.insert(0, root); "
    "from precision_oat.tasks.grading_worker import main; main()"
)


def default_workers() -> int:
    return max(1, min(8, os.cpu_count() or 1))


class _Worker:
    """One grading process, spoken to in JSON lines; its replies go to the pool's queue."""

    def __init__(self, replies: queue.SimpleQueue):
        self.process = subprocess.Popen(
            [sys.executable, "-c", _WORKER_BOOT, _PACKAGE_ROOT], stdin=subprocess.PIPE, stdout=subprocess.PIPE
        )
        self.started = time.monotonic()
        self.ready = False
        self.job: Optional[int] = None  # index of the job in flight
        self.deadline = 0.0
        threading.Thread(target=self._read, args=(replies,), daemon=True).start()

    def _read(self, replies: queue.SimpleQueue) -> None:
        try:
            for line in self.process.stdout:
                replies.put((self, json.loads(line)))
        except ValueError:
            pass  # a garbled line: treat the worker as dead
        finally:
            self.process.stdout.close()
            replies.put((self, None))  # the worker is gone

    def send(self, index: int, job: tuple[str, tuple[str, ...]], timeout_s: float) -> None:
        answer, references = job
        self.process.stdin.write(json.dumps([answer, list(references)]).encode() + b"\n")
        self.process.stdin.flush()
        self.job, self.deadline = index, time.monotonic() + timeout_s

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        try:
            self.process.stdin.close()
        except OSError:
            pass  # the pipe is broken: nothing left to flush


class _Pool:
    """A fixed number of workers; :meth:`run` grades jobs under a per-job deadline."""

    def __init__(self, size: int):
        self.size = size
        self.pid = os.getpid()
        self.replies: queue.SimpleQueue = queue.SimpleQueue()
        self.workers = [_Worker(self.replies) for _ in range(size)]

    def close(self) -> None:
        for worker in self.workers:
            worker.kill()
        self.workers = []

    def _replace(self, worker: _Worker) -> None:
        worker.kill()
        self.workers[self.workers.index(worker)] = _Worker(self.replies)

    def run(self, jobs: Sequence[tuple[str, tuple[str, ...]]], timeout_s: float) -> list[Verdict]:
        verdicts: list[Optional[Verdict]] = [None] * len(jobs)
        crashes = [0] * len(jobs)
        pending = deque(range(len(jobs)))
        while pending or any(w.job is not None for w in self.workers):
            for worker in list(self.workers):
                if pending and worker.ready and worker.job is None:
                    i = pending.popleft()
                    try:
                        worker.send(i, jobs[i], timeout_s)
                    except OSError:  # it died while idle; the job never started
                        pending.appendleft(i)
                        self._replace(worker)
            # A job's clock starts when a worker takes it, so start-up time counts against no job.
            deadlines = [w.deadline for w in self.workers if w.job is not None]
            deadlines += [w.started + _START_TIMEOUT_S for w in self.workers if not w.ready]
            # Short waits: Ctrl-C may land on a reader thread, and then only wakes this one at its timeout.
            wait_s = min([d - time.monotonic() for d in deadlines] + [_POLL_S])
            try:
                worker, message = self.replies.get(timeout=max(0.0, wait_s))
            except queue.Empty:
                worker, message = None, None
            if worker is not None and worker in self.workers:
                if message == "ready":
                    worker.ready = True
                elif message is None:  # it died (out of memory, a crash in sympy, ...)
                    if not worker.ready:
                        worker.kill()
                        raise RuntimeError(
                            f"a grading worker exited while starting (exit code {worker.process.returncode}); "
                            "its error is printed above"
                        )
                    if worker.job is not None:
                        i = worker.job
                        crashes[i] += 1
                        if crashes[i] >= 2:
                            verdicts[i] = "error"
                        else:
                            pending.append(i)
                    self._replace(worker)
                elif worker.job is not None:
                    verdicts[worker.job] = message
                    worker.job = None
            now = time.monotonic()
            for worker in list(self.workers):
                if worker.job is not None and worker.deadline <= now:
                    verdicts[worker.job] = "timeout"
                    self._replace(worker)
                elif not worker.ready and now - worker.started > _START_TIMEOUT_S:
                    raise RuntimeError(f"a grading worker did not start within {_START_TIMEOUT_S:.0f} s")
        return [v if v is not None else "error" for v in verdicts]


_pool: Optional[_Pool] = None
_lock = threading.Lock()


def _discard_pool() -> None:
    """Kill the workers (one may be stuck in sympy) and forget the pool."""
    global _pool
    pool, _pool = _pool, None
    if pool is not None and pool.pid == os.getpid():
        pool.close()


atexit.register(_discard_pool)


def judge_many(
    jobs: Sequence[tuple[str, tuple[str, ...]]], timeout_s: float, workers: Optional[int] = None
) -> list[Verdict]:
    """:func:`judge` each ``(answer, references)``, each within ``timeout_s`` seconds.

    Jobs that :func:`exact_verdict` decides never leave this process. The others go to a pool of
    ``workers`` processes, started on first use and kept; a job's clock starts when a worker takes
    it, and a worker that overruns is killed and replaced while the others keep going.
    """
    global _pool
    verdicts: list[Optional[Verdict]] = [exact_verdict(answer, refs) for answer, refs in jobs]
    todo = [i for i, v in enumerate(verdicts) if v is None]
    if not todo:
        return verdicts  # type: ignore[return-value]
    size = workers or default_workers()
    with _lock:
        if _pool is not None and _pool.pid != os.getpid():
            _pool = None  # inherited through fork: those workers belong to the parent
        if _pool is not None and _pool.size != size:
            _discard_pool()
        if _pool is None:
            _pool = _Pool(size)
        try:
            results = _pool.run([jobs[i] for i in todo], timeout_s)
        except BaseException:
            _discard_pool()  # workers may hold jobs of this call; start clean next time
            raise
    for i, verdict in zip(todo, results):
        verdicts[i] = verdict
    return verdicts  # type: ignore[return-value]
