"""Name → mixin tables, one per hook. Adding a piece is one file plus one ``@register`` line."""

from __future__ import annotations

from typing import Callable, Optional, TypeVar

ADVANTAGES: dict[str, type] = {}
OBJECTIVES: dict[str, type] = {}
CORRECTIONS: dict[str, type] = {}
REDUCTIONS: dict[str, type] = {}

TABLES: dict[str, dict[str, type]] = {
    "advantage": ADVANTAGES,
    "objective": OBJECTIVES,
    "correction": CORRECTIONS,
    "reduction": REDUCTIONS,
}

# Other spellings accepted on the command line, mapped to the canonical name.
ALIASES: dict[str, dict[str, str]] = {kind: {} for kind in TABLES}

T = TypeVar("T", bound=type)


def register(kind: str, name: str, *, aliases: tuple[str, ...] = (),
             reads: Optional[tuple[str, ...]] = None) -> Callable[[T], T]:
    """Class decorator: ``@register("objective", "clip", aliases=("ppo",), reads=("clip_low", "clip_high"))``.

    ``reads``: the :class:`~precision_oat.algorithms.AlgorithmSpec` constants the piece reads, so that a constant no
    chosen piece reads is refused rather than ignored; None (a piece that does not say) may read any.
    """
    if kind not in TABLES:
        raise ValueError(f"unknown piece kind {kind!r}; expected one of {sorted(TABLES)}")

    def add(cls: T) -> T:
        table = TABLES[kind]
        for spelling in (name, *aliases):
            if spelling in table or spelling in ALIASES[kind]:
                raise ValueError(f"{kind} {spelling!r} is already registered")
        table[name] = cls
        for alias in aliases:
            ALIASES[kind][alias] = name
        cls.piece_name = name
        cls.reads = reads
        return cls

    return add


def valid_names(kind: str) -> list[str]:
    """Every accepted spelling for ``kind``, canonical names and aliases, sorted."""
    return sorted([*TABLES[kind], *ALIASES[kind]])


def canonical(kind: str, name: str) -> str:
    """The canonical name behind ``name`` (itself unless it is an alias); KeyError if unknown."""
    name = ALIASES[kind].get(name, name)
    if name not in TABLES[kind]:
        raise KeyError(name)
    return name


def lookup(kind: str, name: str) -> type:
    """The mixin registered under ``name`` (or one of its aliases)."""
    return TABLES[kind][canonical(kind, name)]
