"""The package's layers, read from the imports of every module (so they stay true).

    core          precision_oat/* outside engines/ (and not the CLI dispatcher main.py)
    engines       precision_oat/engines/local, precision_oat/engines/oat

The core never imports an engine; the Oat engine never imports the local one; no module
imports, directly or through others, a module that imports it back.
"""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "precision_oat"


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path) -> set[str]:
    """Every precision_oat module named by an import anywhere in the file (top level or inside functions)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            # `from pkg import mod` imports the module; `from mod import name` imports mod.
            submodules = {f"{node.module}.{a.name}" for a in node.names} & MODULES.keys()
            found |= submodules or {node.module}
    return {name for name in found if name in MODULES}


MODULES = {module_name(p): p for p in PACKAGE.rglob("*.py")}
GRAPH = {name: imports_of(path) for name, path in MODULES.items()}


def test_the_core_never_imports_an_engine():
    core = [m for m in MODULES if not m.startswith("precision_oat.engines") and m != "precision_oat.main"]
    offenders = {m: sorted(i for i in GRAPH[m] if i.startswith("precision_oat.engines")) for m in core}
    assert not {m: i for m, i in offenders.items() if i}


def test_the_oat_engine_never_imports_the_local_engine():
    offenders = {m: sorted(i for i in GRAPH[m] if i.startswith("precision_oat.engines.local"))
                 for m in MODULES if m.startswith("precision_oat.engines.oat")}
    assert not {m: i for m, i in offenders.items() if i}


def test_no_import_cycles():
    def reaches(start: str) -> set[str]:
        seen, todo = set(), [start]
        while todo:
            for nxt in GRAPH[todo.pop()] - seen:
                seen.add(nxt)
                todo.append(nxt)
        return seen

    cycles = sorted(m for m in MODULES if m in reaches(m))
    assert not cycles


def test_the_rules_see_real_imports():
    # The reader finds imports inside functions too (the loop builds DeepSpeed lazily).
    assert "precision_oat.engines.local.deepspeed_learner" in GRAPH["precision_oat.engines.local.loop"]
    assert "precision_oat.engines.local.loop" in GRAPH["precision_oat.main"]
