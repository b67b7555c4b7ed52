"""A grading worker: reads ``[answer, references]`` JSON lines on stdin, writes one verdict per line.

:mod:`precision_oat.tasks.grading_pool` starts it as a fresh interpreter (not a multiprocessing
child, so the caller's main module is never imported here) and enforces each job's timeout by
killing the process. The first line it writes is ``"ready"``, once math-verify is imported.
It exits when its stdin closes.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys

from precision_oat.tasks.grading import judge


def main() -> None:
    # Replies go to a private copy of stdout; whatever a library prints lands on stderr instead.
    replies = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    # Ctrl-C reaches the whole process group; the caller decides when a worker ends.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # math-verify warns on every call that its own timeout is off; the caller's is on.
    logging.getLogger("math_verify").setLevel(logging.ERROR)

    def reply(message: str) -> None:
        replies.write(json.dumps(message).encode() + b"\n")
        replies.flush()

    judge("\\sqrt{8}", ("2\\sqrt{2}",))  # import and warm up math-verify before taking jobs
    reply("ready")
    for line in sys.stdin.buffer:
        answer, references = json.loads(line)
        try:
            verdict = judge(answer, tuple(references))
        except Exception:
            verdict = "error"
        reply(verdict)


if __name__ == "__main__":
    main()
