"""Presets: YAML files of flat ``flag_name: value`` pairs that fill :class:`Args`.

A preset uses the same names as the command line (underscores or dashes), so a line of
a preset and a flag are interchangeable. ``parse_args`` reads ``--preset`` first, builds
the defaults from it, then lets the remaining flags override them.
"""

from __future__ import annotations

import dataclasses
import difflib
import re
import sys
from pathlib import Path
from typing import Any, Optional, Sequence

import yaml

from precision_oat.args import Args, LogArgs, flag_groups, refuse_unread
from precision_oat.checks import checks_deferred
from precision_oat.errors import UserError


class _PresetLoader(yaml.SafeLoader):
    """YAML 1.1 as PyYAML reads it, with 1.2's exponent floats and booleans: ``1e-5`` is a number and ``no`` a
    string (``prompt_template: no`` names the template "no"), as on the command line; only true/false are booleans."""


_PresetLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float", re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9][0-9_]*)[eE][-+]?[0-9]+$"), list("-+0123456789.")
)
_BOOL = "tag:yaml.org,2002:bool"
_PresetLoader.yaml_implicit_resolvers = {
    first: [(tag, pattern) for tag, pattern in resolvers if tag != _BOOL]
    for first, resolvers in _PresetLoader.yaml_implicit_resolvers.items()
}
_PresetLoader.add_implicit_resolver(_BOOL, re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF"))


def _mapping_without_repeats(loader: _PresetLoader, node: yaml.MappingNode) -> dict:
    # YAML wants each key once; PyYAML would keep the last of two silently.
    seen = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node)
        if key in seen:
            raise yaml.constructor.ConstructorError(problem=f"{key!r} is given twice; keep one",
                                                    problem_mark=key_node.start_mark)
        seen.add(key)
    return loader.construct_mapping(node)


_PresetLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping_without_repeats)


# Entries of a run's config.json that are not flags: the precision contract and the resumes.
RUN_RECORDS = ("precision_contract", "resumes")


def load_preset(path: Path | str, base: Optional[Args] = None) -> Args:
    """Args with the values of the preset at ``path`` applied on top of ``base`` (or the defaults)."""
    path = Path(path)
    if path.is_dir():
        raise UserError(f"--preset {path}: is a folder; pass a YAML file such as those under args/ "
                        "(a run's own is OUTPUT_DIR/config.json)")
    if not path.is_file():
        raise UserError(f"--preset {path}: no such file; pass a YAML file such as those under args/")
    try:
        values = yaml.load(path.read_text(), Loader=_PresetLoader) or {}
    except yaml.YAMLError as e:
        where = getattr(e, "problem_mark", None)
        line = f" at line {where.line + 1}" if where is not None else ""
        problem = getattr(e, "problem", None) or type(e).__name__
        raise UserError(f"--preset {path}: not valid YAML{line} ({problem}); write one `flag_name: value` per line") from None
    if not isinstance(values, dict):
        raise UserError(f"--preset {path}: expected a mapping of flag names to values, one `flag_name: value` per line")
    # A run's config.json is a preset too: what the run recorded besides its flags is skipped.
    values = {k: v for k, v in values.items() if k not in RUN_RECORDS}
    return apply_values(base or Args(), values, source=f"--preset {path}")


def apply_values(args: Args, values: dict[str, Any], source: str = "preset") -> Args:
    """``args`` with flat ``flag_name: value`` pairs applied; bad values fail naming ``source`` and the flag."""
    owner = flag_groups()
    updates: dict[str, dict[str, Any]] = {}
    for key, value in values.items():
        name = str(key).replace("-", "_")
        if name not in owner:
            close = difflib.get_close_matches(name, owner, n=1)
            hint = (f"did you mean {close[0]!r}?" if close else
                    "the keys are the flags `python -m precision_oat.main --help` lists, with dashes or underscores")
            raise UserError(f"{source}: unknown key {key!r}; {hint}")
        if isinstance(value, list):
            value = tuple(value)
        group = updates.setdefault(owner[name], {})
        if name in group:
            raise UserError(f"{source}: {key!r} names --{name.replace('_', '-')} a second time; keep one of its keys")
        group[name] = value
    top = updates.pop("", {})
    # Paths arrive as YAML strings; anything else is left for the type check to name.
    if isinstance(top.get("preset"), str):
        top["preset"] = Path(top["preset"])
    for key in ("output_dir",):
        # A blank string stays one: Path("") would be the current folder, and the check refuses it.
        if isinstance(updates.get("log", {}).get(key), str) and updates["log"][key].strip():
            updates["log"][key] = Path(updates["log"][key])
    try:
        nested = {group: dataclasses.replace(getattr(args, group), **fields) for group, fields in updates.items()}
        return dataclasses.replace(args, **top, **nested)
    except UserError as e:
        raise UserError(f"{source}: {e}") from None


def to_values(args: Args) -> dict[str, Any]:
    """The inverse of :func:`apply_values`: every field as a flat, YAML-ready mapping."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(args):
        value = getattr(args, f.name)
        items = dataclasses.asdict(value).items() if dataclasses.is_dataclass(value) else [(f.name, value)]
        for name, v in items:
            out[name] = str(v) if isinstance(v, Path) else list(v) if isinstance(v, tuple) else v
    return out


def refuse_unread_changes(before: Args, after: Args) -> None:
    """:func:`~precision_oat.args.refuse_unread` for the flags that made ``after`` of ``before`` (the defaults or a
    preset): those of the command line, or of make_args' keywords."""
    old = to_values(before)
    refuse_unread(after, given={name for name, value in to_values(after).items() if value != old[name]})


def _preset_path(argv: Sequence[str]) -> Optional[str]:
    """The last ``--preset`` of ``argv``: as for every flag, the last one given wins (and is the one recorded)."""
    path = None
    for i, token in enumerate(argv):
        if token == "--preset" and i + 1 < len(argv):
            path = argv[i + 1]
        elif token.startswith("--preset="):
            path = token.split("=", 1)[1]
    return path


def _blank_value(argv: Sequence[str], flag: str) -> bool:
    """True when ``flag`` is given an empty or blank value."""
    for i, token in enumerate(argv):
        if token == flag and i + 1 < len(argv) and not argv[i + 1].strip():
            return True
        if token.startswith(flag + "=") and not token.split("=", 1)[1].strip():
            return True
    return False


def parse_args(argv: Optional[Sequence[str]] = None, prog: str = "python -m precision_oat.main") -> Args:
    """Parse the command line (preset first, flags on top) into :class:`Args`."""
    import tyro

    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        default = Args()
        preset = _preset_path(argv)
        if preset is not None and "-h" not in argv and "--help" not in argv:
            default = load_preset(preset)
        if _blank_value(argv, "--output-dir"):
            LogArgs(output_dir="")  # tyro would read it as the current folder; the check refuses it in one line
        # tyro would print a check's failure inside its multi-line panel: build first, check once after.
        with checks_deferred():
            args = tyro.cli(Args, args=argv, default=default, prog=prog, config=(tyro.conf.OmitArgPrefixes,))
        args.check()
        refuse_unread_changes(default, args)
    except UserError as e:
        sys.exit(f"error: {e}")
    return args
