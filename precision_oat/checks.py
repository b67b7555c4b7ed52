"""Checks of flag values, each failing with one :class:`UserError` line: flag, value, rule, fix.

The args dataclasses derive from :class:`Checked`, so every way of building them (tyro,
a preset through ``dataclasses.replace``, code) runs the same checks in ``__post_init__``.
Presets skip tyro's parsing, hence :func:`check_types` on top of the range checks.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
import typing
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Any, Iterator, Literal, NoReturn, Optional, Union

from precision_oat.errors import UserError

_deferred: ContextVar[bool] = ContextVar("precision_oat_checks_deferred", default=False)


@contextmanager
def checks_deferred() -> Iterator[None]:
    """Dataclasses built inside the block skip their checks; the caller runs ``check()`` once after.

    tyro catches a ValueError raised while it builds a dataclass and prints it inside a
    multi-line panel; deferring lets the command line report it as one ``error:`` line.
    """
    token = _deferred.set(True)
    try:
        yield
    finally:
        _deferred.reset(token)


class Checked:
    """Base of the args dataclasses: ``__post_init__`` runs ``check()`` unless checks are deferred."""

    def __post_init__(self) -> None:
        if not _deferred.get():
            self.check()

    def check(self) -> None:
        check_types(self)


def flag(name: str) -> str:
    """The command-line spelling of field ``name``."""
    return "--" + name.replace("_", "-")


def shown(value: Any) -> str:
    """``value`` as it would be typed after its flag."""
    if isinstance(value, (tuple, list)):
        return " ".join(shown(v) for v in value) if value else "(empty)"
    if isinstance(value, str):
        return value if value and not any(c.isspace() for c in value) else repr(value)
    return str(value)


def typed(name: str, value: Any) -> str:
    """Field ``name`` set to ``value`` as it is typed on the command line: ``--flag``, ``--no-flag`` or ``--flag value``."""
    if isinstance(value, bool):
        return flag(name) if value else "--no-" + name.replace("_", "-")
    return f"{flag(name)} {shown(value)}"


def reject(name: str, value: Any, rule: str) -> NoReturn:
    raise UserError(f"{flag(name)} {shown(value)}: {rule}")


def largest_divisor_below(n: int, bound: int) -> int:
    """The largest divisor of ``n`` below ``bound``: the batch size to suggest when ``bound`` does not divide ``n``."""
    return max(d for d in range(1, bound) if n % d == 0)


# --- types ---


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def check_types(obj: Any) -> None:
    """Each init field of dataclass ``obj`` holds a value of its annotated type."""
    hints = _hints(type(obj))
    for f in dataclasses.fields(obj):
        if not f.init:
            continue
        value = getattr(obj, f.name)
        expected = _expected(hints[f.name], value)
        if expected is not None:
            reject(f.name, value, f"must be {expected}")


def _expected(tp: Any, value: Any) -> Optional[str]:
    """None when ``value`` fits ``tp``, else what ``tp`` wants, in words."""
    origin, params = typing.get_origin(tp), typing.get_args(tp)
    if origin is Union:
        options = [p for p in params if p is not type(None)]
        if value is None and len(options) < len(params):
            return None
        wants = [_expected(p, value) for p in options]
        if None in wants:
            return None
        return " or ".join(wants) + (" (or null to unset it)" if len(options) < len(params) else "")
    if origin is Literal:
        return None if value in params and type(value) in {type(p) for p in params} else (
            "one of " + ", ".join(str(p) for p in params))
    if origin is tuple:
        variadic = len(params) == 2 and params[1] is Ellipsis
        if isinstance(value, (tuple, list)) and (variadic or len(value) == len(params)):
            items = [params[0]] * len(value) if variadic else list(params)
            if all(_expected(p, v) is None for p, v in zip(items, value)):
                return None
        if variadic:
            return f"a list, each item {_expected(params[0], _NOTHING)}"
        return f"a list of {len(params)} items: " + ", ".join(_expected(p, _NOTHING) for p in params)
    if tp is bool:
        return None if isinstance(value, bool) else "true or false"
    if tp is int:
        return None if isinstance(value, int) and not isinstance(value, bool) else "an integer"
    if tp is float:
        return None if isinstance(value, (int, float)) and not isinstance(value, bool) else "a number"
    if tp is str:
        return None if isinstance(value, str) else "a string"
    if tp is Path:
        return None if isinstance(value, (str, os.PathLike)) else "a path"
    if dataclasses.is_dataclass(tp):
        return None if isinstance(value, tp) else f"a {tp.__name__}"
    return None


# Fits no type, so that _expected(tp, _NOTHING) describes tp.
_NOTHING = object()


# --- ranges ---


def integer(obj: Any, name: str, minimum: int, maximum: Optional[int] = None, why: str = "") -> None:
    """Field ``name`` of ``obj`` is None or an integer in [minimum, maximum]."""
    value = getattr(obj, name)
    if value is None or (value >= minimum and (maximum is None or value <= maximum)):
        return
    rule = f"must be an integer ≥ {minimum}" if maximum is None else f"must be an integer from {minimum} to {maximum}"
    reject(name, value, rule + (f" ({why})" if why else ""))


def number(
    obj: Any,
    name: str,
    *,
    gt: Optional[float] = None,
    ge: Optional[float] = None,
    lt: Optional[float] = None,
    le: Optional[float] = None,
    why: str = "",
) -> None:
    """Field ``name`` of ``obj`` is None or a finite number inside the given bounds."""
    value = getattr(obj, name)
    if value is None:
        return
    inside = (
        math.isfinite(value)
        and (gt is None or value > gt)
        and (ge is None or value >= ge)
        and (lt is None or value < lt)
        and (le is None or value <= le)
    )
    if not inside:
        rule = " ".join(["must be a finite number", interval(gt, ge, lt, le)]).rstrip()
        reject(name, value, rule + (f" ({why})" if why else ""))


def interval(gt: Optional[float], ge: Optional[float], lt: Optional[float], le: Optional[float]) -> str:
    """``> 0``, ``≥ 0``, ``in (0, 1]`` … in words."""
    low = (gt, "(") if gt is not None else (ge, "[") if ge is not None else None
    high = (lt, ")") if lt is not None else (le, "]") if le is not None else None
    if low and high:
        return f"in {low[1]}{_num(low[0])}, {_num(high[0])}{high[1]}"
    if low:
        return f"{'>' if low[1] == '(' else '≥'} {_num(low[0])}"
    if high:
        return f"{'<' if high[1] == ')' else '≤'} {_num(high[0])}"
    return ""


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else str(x)


def text(obj: Any, name: str, why: str = "") -> None:
    """Field ``name`` of ``obj`` is None or a non-blank string."""
    value = getattr(obj, name)
    if value is not None and not value.strip():
        reject(name, value, "must not be empty" + (f" ({why})" if why else ""))


def folder(obj: Any, name: str) -> None:
    """Field ``name`` of ``obj`` is a folder, or a path where one can be made: no file stands at it or above it."""
    path = Path(getattr(obj, name))
    standing = next((p for p in (path, *path.parents) if p.exists()), None)
    if standing is None or standing.is_dir():
        return
    if standing == path:
        reject(name, path, "is a file; pass a folder (it is created when missing)")
    reject(name, path, f"{standing} is a file, so no folder can be made under it; pass another folder")
