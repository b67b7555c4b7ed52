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
   from outside (:mod:`precision_oat.tasks.grading_pool`, whose ``judge_many`` grades a batch).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import MAX_EMAX, MIN_EMIN, Context, Decimal, Inexact, Overflow, Underflow
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

# Removed before comparing strings: sizing and spacing macros, dollar signs (currency, then math
# delimiters), degrees, percent.
_DROP = ("\\left", "\\right", "\\displaystyle", "\\!", "\\,", "\\;", "\\:", "\\ ", "\\$", "$")
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
        # Math delimiters, unless the text has its own; an escaped \$ is a currency sign, not one.
        text = text if re.search(r"(?<!\\)\$", text) else f"${text}$"
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
