"""Math answer grading: final-answer extraction, equivalence, and a hard timeout.

1. Extraction (in the caller's process, linear time): the final answer is the content of the
   last ``\\boxed{...}`` / ``\\fbox{...}`` (balanced braces). Templates that open a ``<think>``
   block count only the text after exactly one ``</think>``; the ``r1`` template counts only
   the last ``<answer>...</answer>`` after ``</think>``.
2. Exact numbers (in the caller's process, no sympy): an answer that is a plain number literal
   (an integer, a decimal, scientific notation such as ``1.5e3`` or ``1.5 \\times 10^{3}``, or a
   ratio ``p/q`` / ``\\frac{p}{q}`` of such numbers, with an optional sign) is a rational number,
   kept exact with :class:`decimal.Decimal` (never a float). Two literals are equal when they are
   equal as rationals: ``3/4``, ``6/8``, ``0.75`` and ``\\frac{3}{4}`` are one answer, while
   ``0.333333`` is not ``1/3`` and ``12345678901234567891`` is not ``12345678901234567890``.
   When the answer and every reference are literals, this comparison is the verdict and
   math-verify is not asked (it rounds floats to 6 decimals and reads ``2e19`` as ``2*E*19``).
   A percent sign counts as decoration or as /100: ``50\\%`` matches ``50`` and ``0.5``.
3. Otherwise equivalence is a normalised-string comparison, then math-verify (``parse`` +
   ``verify``) against each accepted reference that is not already decided exactly.
4. math-verify can hang on adversarial input (a power tower such as 9^{9^{9^{9^9}}} keeps
   sympy busy for minutes) and its own timeout uses ``signal.alarm``, which only works in a
   main thread. So every math-verify call runs in a worker process with the timeout enforced
   from outside: a worker that overruns is killed and replaced. A timed-out, unparsable or
   crashed comparison grades as incorrect and is counted. Workers are plain interpreters
   running :mod:`precision_oat.tasks.grading_worker` (not multiprocessing children), so they
   never import the caller's main module: grading works from a script without a
   ``if __name__ == "__main__":`` guard, from ``python -`` and from a notebook alike.
"""

from __future__ import annotations

import atexit
import json
import os
import queue
import re
import subprocess
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass
from decimal import MAX_EMAX, MIN_EMIN, Context, Decimal, Inexact, Overflow, Underflow
from pathlib import Path
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


def normalize(answer: str) -> str:
    """A light canonical form: no spacing macros, ``\\dfrac``/``\\tfrac`` -> ``\\frac``, no ``\\text``."""
    s = answer.strip()
    s = re.sub(r"\\(?:text|textbf|mathrm|mbox)\{([^{}]*)\}", r"\1", s)
    for token in _DROP:
        s = s.replace(token, "")
    s = s.replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac").replace("{,}", "")
    s = re.sub(r"\s+", "", s).rstrip(".")
    return s


# Number literals, matched against the normalised answer; ASCII digits only. Exponents stop at
# 6 digits: a larger one is no answer a grader needs to hold exactly.
_UNSIGNED = r"(?:\d+(?:\.\d*)?|\.\d+)"
_SIGNED = rf"[+-]?{_UNSIGNED}"
_SCIENTIFIC = re.compile(
    rf"({_SIGNED})(?:[eE]([+-]?\d{{1,6}})|(?:\\times|\\cdot)10\^(?:\{{([+-]?\d{{1,6}})\}}|(\d)))?", re.ASCII
)
_SLASH = re.compile(rf"({_SIGNED})/({_SIGNED})", re.ASCII)
_FRAC = re.compile(rf"([+-]?)\\frac(?:\{{({_SIGNED})\}}|(\d))(?:\{{({_SIGNED})\}}|(\d))", re.ASCII)
_HUNDRED = Decimal(100)


@dataclass(frozen=True)
class ExactNumber:
    """A number literal as an exact ratio of decimals; ``percent`` if it carried a percent sign."""

    numerator: Decimal
    denominator: Decimal  # never zero
    percent: bool = False

    def equals(self, other: "ExactNumber") -> bool:
        if self.percent == other.percent:
            return _same_ratio(self.numerator, self.denominator, other.numerator, other.denominator)
        plain, pct = (other, self) if self.percent else (self, other)
        return _same_ratio(plain.numerator, plain.denominator, pct.numerator, pct.denominator) or _same_ratio(
            plain.numerator, plain.denominator, pct.numerator, _exact_product(pct.denominator, _HUNDRED)
        )


def _exact_product(x: Decimal, y: Decimal) -> Decimal:
    # A product of n- and m-digit coefficients has at most n + m digits: this precision is exact.
    digits = len(x.as_tuple().digits) + len(y.as_tuple().digits)
    context = Context(prec=digits, Emax=MAX_EMAX, Emin=MIN_EMIN, traps=[Inexact, Overflow, Underflow])
    return context.multiply(x, y)


def _same_ratio(a: Decimal, b: Decimal, c: Decimal, d: Decimal) -> bool:
    """Whether a/b == c/d, exactly (b and d nonzero)."""
    return _exact_product(a, d) == _exact_product(c, b)


def exact_number(answer: str) -> Optional[ExactNumber]:
    """The exact value of ``answer`` if it is a plain number literal (see the module docstring), else None."""
    s = normalize(answer)
    percent = "%" in answer
    match = _SCIENTIFIC.fullmatch(s)
    if match:
        mantissa, *exponents = match.groups()
        exponent = next((e for e in exponents if e is not None), None)
        return ExactNumber(Decimal(mantissa if exponent is None else f"{mantissa}e{exponent}"), Decimal(1), percent)
    match = _SLASH.fullmatch(s)
    if match:
        numerator, denominator = Decimal(match.group(1)), Decimal(match.group(2))
    else:
        match = _FRAC.fullmatch(s)
        if not match:
            return None
        sign, braced_num, digit_num, braced_den, digit_den = match.groups()
        numerator, denominator = Decimal(braced_num or digit_num), Decimal(braced_den or digit_den)
        if sign == "-":
            numerator = numerator.copy_negate()  # exact, unlike unary minus under a context
    if denominator.is_zero():
        return None
    return ExactNumber(numerator, denominator, percent)


def strings_equal(answer: str, reference: str) -> bool:
    """The fast path: equal after :func:`normalize`, or equal as exact number literals."""
    a, r = normalize(answer), normalize(reference)
    if a == r and a:
        return True
    x, y = exact_number(answer), exact_number(reference)
    return x is not None and y is not None and x.equals(y)


def exact_verdict(answer: str, references: Sequence[str]) -> Optional[Verdict]:
    """The verdict without math-verify where there is one: ``"correct"`` if :func:`strings_equal`
    holds for a reference, ``"incorrect"`` if the answer and every reference are number literals
    (none equal), else None."""
    if any(strings_equal(answer, r) for r in references):
        return "correct"
    if exact_number(answer) is not None and all(exact_number(r) is not None for r in references):
        return "incorrect"
    return None


def reference_answers(reference: str | Sequence[str]) -> tuple[str, ...]:
    """The accepted answers of a reference; a boxed reference is unboxed."""
    refs = (reference,) if isinstance(reference, str) else tuple(reference)
    return tuple((last_boxed(r) or r) if ("\\boxed" in r or "\\fbox" in r) else r for r in refs)


def judge(answer: str, references: tuple[str, ...]) -> Verdict:
    """Equivalence of ``answer`` to any reference: exact numbers first, then math-verify.

    Calls math-verify without a timeout, so it runs inside a grading worker.
    """
    verdict = exact_verdict(answer, references)
    if verdict is not None:
        return verdict
    if exact_number(answer) is not None:
        # A literal answer against a literal reference was decided exactly above.
        references = tuple(r for r in references if exact_number(r) is None)

    from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify

    config = (LatexExtractionConfig(boxed_match_priority=0), ExprExtractionConfig())

    def _parse(text: str):
        text = text if "$" in text else f"${text}$"
        return parse(
            text,
            extraction_config=config,
            fallback_mode="no_fallback",
            extraction_mode="first_match",
            parsing_timeout=None,  # the caller enforces the timeout; signal.alarm is not ours to use
        )

    predicted = _parse(answer)
    if not predicted:
        return "unparsable"
    for reference in references:
        gold = _parse(reference)
        if gold and verify(gold, predicted, timeout_seconds=None):
            return "correct"
    return "incorrect"


# --- the worker processes ---

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
