"""Math answer grading: final-answer extraction, equivalence, and a hard timeout.

1. Extraction (in the caller's process, linear time): the final answer is the content of the
   last ``\\boxed{...}`` / ``\\fbox{...}`` (balanced braces). Templates that open a ``<think>``
   block count only the text after exactly one ``</think>``; the ``r1`` template counts only
   the last ``<answer>...</answer>`` after ``</think>``.
2. Equivalence: a normalised-string comparison first (no sympy, no pool), then math-verify
   (``parse`` + ``verify``) against each accepted reference.
3. math-verify can hang on adversarial input (a power tower such as 9^{9^{9^{9^9}}} keeps
   sympy busy for minutes) and its own timeout uses ``signal.alarm``, which only works in a
   main thread. So every math-verify call runs in a worker of a process pool with the timeout
   enforced from outside: a worker that overruns is killed with its pool, which is recreated.
   A timed-out, unparsable or crashed comparison grades as incorrect and is counted.
   Workers start with ``forkserver`` (``spawn`` where that is missing), never ``fork``, so a
   script that grades must guard its entry point with ``if __name__ == "__main__":``.
"""

from __future__ import annotations

import atexit
import multiprocessing
import os
import re
import threading
import time
from collections import deque
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from typing import Literal, Optional, Sequence

# Templates whose prompt opens a <think> block: only text after exactly one </think> counts.
THINK_TEMPLATES = frozenset({"r1_distill_qwen"})
# Templates that put the answer in <answer>...</answer> tags.
ANSWER_TAG_TEMPLATES = frozenset({"r1"})

Verdict = Literal["correct", "incorrect", "unparsable", "timeout", "error"]

_BOX_COMMANDS = ("\\boxed", "\\fbox")


# --- extraction ---


def last_boxed(text: str) -> Optional[str]:
    """Content of the last ``\\boxed{...}`` or ``\\fbox{...}``; None if absent, unbalanced or empty."""
    start = max(text.rfind(cmd) for cmd in _BOX_COMMANDS)
    if start < 0:
        return None
    i = start + (len("\\boxed") if text.startswith("\\boxed", start) else len("\\fbox"))
    if i < len(text) and text[i] == "{":
        depth = 0
        for j in range(i, len(text)):
            if text[j] == "{":
                depth += 1
            elif text[j] == "}":
                depth -= 1
                if depth == 0:
                    content = text[i + 1 : j].strip()
                    return content or None
        return None
    # "\boxed 5": the argument runs to the next space or "$".
    match = re.match(r"\s+([^\s$]+)", text[i:])
    return match.group(1) if match else None


def extract_answer(
    response: str, template: Optional[str] = None, *, require_think: Optional[bool] = None
) -> Optional[str]:
    """The final answer of ``response`` under ``template``'s format rules, or None.

    ``require_think`` overrides whether the template's "exactly one ``</think>``" rule applies.
    """
    if template in ANSWER_TAG_TEMPLATES:
        return _answer_tag(response)
    if require_think if require_think is not None else template in THINK_TEMPLATES:
        parts = response.split("</think>")
        if len(parts) != 2:
            return None
        response = parts[1]
    return last_boxed(response)


def _answer_tag(response: str) -> Optional[str]:
    _, sep, tail = response.partition("</think>")
    if not sep:
        return None
    start = tail.rfind("<answer>")
    end = tail.rfind("</answer>")
    if start < 0 or end < start:
        return None
    content = tail[start + len("<answer>") : end].strip()
    if "\\boxed" in content or "\\fbox" in content:
        return last_boxed(content)
    return content or None


# --- equivalence ---

# Removed before comparing strings: sizing and spacing macros, math delimiters, degrees, percent.
_DROP = ("\\left", "\\right", "\\displaystyle", "\\!", "\\,", "\\;", "\\:", "\\ ", "$")
_DROP += ("^{\\circ}", "^\\circ", "\\%", "%")
_NUMBER = re.compile(r"^-?(\d+(\.\d*)?|\.\d+)$")


def normalize(answer: str) -> str:
    """A light canonical form: no spacing macros, ``\\dfrac``/``\\tfrac`` -> ``\\frac``, no ``\\text``."""
    s = answer.strip()
    s = re.sub(r"\\(?:text|textbf|mathrm|mbox)\{([^{}]*)\}", r"\1", s)
    for token in _DROP:
        s = s.replace(token, "")
    s = s.replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac").replace("{,}", "")
    s = re.sub(r"\s+", "", s).rstrip(".")
    return s


def strings_equal(answer: str, reference: str) -> bool:
    """The fast path: equal after :func:`normalize`, or equal as plain decimal numbers."""
    a, r = normalize(answer), normalize(reference)
    if a == r and a:
        return True
    if _NUMBER.match(a) and _NUMBER.match(r):
        return float(a) == float(r)
    return False


def reference_answers(reference: str | Sequence[str]) -> tuple[str, ...]:
    """The accepted answers of a reference; a boxed reference is unboxed."""
    refs = (reference,) if isinstance(reference, str) else tuple(reference)
    return tuple((last_boxed(r) or r) if ("\\boxed" in r or "\\fbox" in r) else r for r in refs)


def judge(answer: str, references: tuple[str, ...]) -> Verdict:
    """math-verify equivalence of ``answer`` to any reference. Runs inside a pool worker."""
    from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify

    config = (LatexExtractionConfig(boxed_match_priority=0), ExprExtractionConfig())

    def _parse(text: str):
        text = text if "$" in text else f"${text}$"
        return parse(
            text,
            extraction_config=config,
            fallback_mode="no_fallback",
            extraction_mode="first_match",
            parsing_timeout=None,  # the pool enforces the timeout; signal.alarm is not ours to use
        )

    predicted = _parse(answer)
    if not predicted:
        return "unparsable"
    for reference in references:
        gold = _parse(reference)
        if gold and verify(gold, predicted, timeout_seconds=None):
            return "correct"
    return "incorrect"


# --- the process pool ---

_pool: Optional[ProcessPoolExecutor] = None
_pool_workers = 0
_lock = threading.Lock()


def default_workers() -> int:
    return max(1, min(8, os.cpu_count() or 1))


def _init_worker() -> None:
    import logging

    import math_verify  # noqa: F401  (import once per worker, not per item)

    # math-verify warns on every process that its own timeout is off; ours is outside.
    logging.getLogger("math_verify").setLevel(logging.ERROR)


def _ping() -> int:
    time.sleep(0.05)  # long enough that each worker picks up one ping
    return os.getpid()


def _context():
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    context = multiprocessing.get_context("forkserver")
    # Workers fork from a server that has math-verify imported: a restart after a timeout
    # then costs a fork, not an interpreter start. (No effect if the server already runs.)
    context.set_forkserver_preload(["__main__", "math_verify", __name__])
    return context


def _get_pool(workers: int) -> ProcessPoolExecutor:
    global _pool, _pool_workers
    if _pool is not None and _pool_workers != workers:
        _discard_pool()
    if _pool is None:
        pool = ProcessPoolExecutor(max_workers=workers, mp_context=_context(), initializer=_init_worker)
        # Start every worker now, so that per-item deadlines do not include start-up time.
        try:
            for f in [pool.submit(_ping) for _ in range(workers)]:
                f.result(timeout=300)
        except BrokenProcessPool as e:
            pool.shutdown(wait=False, cancel_futures=True)
            raise RuntimeError(
                "the grading process pool failed to start; a script that grades at import time "
                "must guard its entry point with `if __name__ == \"__main__\":`"
            ) from e
        _pool, _pool_workers = pool, workers
    return _pool


def _discard_pool() -> None:
    """Kill the pool's workers (one may be stuck in sympy) and forget the pool."""
    global _pool
    pool, _pool = _pool, None
    if pool is None:
        return
    for process in list((getattr(pool, "_processes", None) or {}).values()):
        if process.is_alive():
            process.kill()
    pool.shutdown(wait=False, cancel_futures=True)


atexit.register(_discard_pool)


def judge_many(
    jobs: Sequence[tuple[str, tuple[str, ...]]], timeout_s: float, workers: Optional[int] = None
) -> list[Verdict]:
    """:func:`judge` each ``(answer, references)`` in the pool, each within ``timeout_s`` seconds.

    At most ``workers`` jobs are in flight, so a job's clock starts when a worker takes it.
    When a job overruns, the pool is killed and the other in-flight jobs are resubmitted.
    """
    workers = workers or default_workers()
    verdicts: list[Optional[Verdict]] = [None] * len(jobs)
    crashes = [0] * len(jobs)
    pending = deque(range(len(jobs)))
    with _lock:
        inflight: dict[Future, tuple[int, float]] = {}
        while pending or inflight:
            pool = _get_pool(workers)
            restart = False
            while pending and len(inflight) < workers:
                i = pending.popleft()
                try:
                    inflight[pool.submit(judge, *jobs[i])] = (i, time.monotonic() + timeout_s)
                except (BrokenProcessPool, RuntimeError):
                    pending.appendleft(i)
                    restart = True
                    break
            if inflight and not restart:
                soonest = min(deadline for _, deadline in inflight.values())
                left = max(0.0, soonest - time.monotonic())
                done, _ = wait(list(inflight), timeout=left, return_when=FIRST_COMPLETED)
                for future in done:
                    i, _ = inflight.pop(future)
                    try:
                        verdicts[i] = future.result()
                    except BrokenProcessPool:
                        # A worker died (e.g. out of memory); retry once, then give up on the job.
                        crashes[i] += 1
                        if crashes[i] >= 2:
                            verdicts[i] = "error"
                        else:
                            pending.append(i)
                        restart = True
                    except Exception:
                        verdicts[i] = "error"
                now = time.monotonic()
                for future, (i, deadline) in list(inflight.items()):
                    if deadline <= now and not future.done():
                        verdicts[i] = "timeout"
                        del inflight[future]
                        restart = True
            if restart:
                pending.extendleft(i for i, _ in inflight.values())
                inflight.clear()
                _discard_pool()
    return [v if v is not None else "error" for v in verdicts]
