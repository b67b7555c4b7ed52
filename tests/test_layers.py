"""The package's layers, as docs/architecture.md's table states them, checked against every import.

Imports are read from the source (absolute and relative, at top level and inside functions),
so the rules stay true as the code changes; planted violations prove the reader sees them.
"""

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "precision_oat"
TABLE_ROW = re.compile(r"^\| (\d+) \| (.+?) \|")


def layer_table(text: str) -> dict[str, int]:
    """Folder or module name → layer number, from the markdown table of docs/architecture.md."""
    layers = {}
    for line in text.splitlines():
        row = TABLE_ROW.match(line)
        if row:
            for name in re.findall(r"`([\w.]+)`", row.group(2)):
                layers[name] = int(row.group(1))
    return layers


LAYERS = layer_table((ROOT / "docs" / "architecture.md").read_text())


def module_name(path: Path, package: Path) -> str:
    parts = path.relative_to(package.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(package: Path) -> dict[str, set[str]]:
    """Module → the package's modules it imports."""
    modules = {module_name(p, package): p for p in package.rglob("*.py")}
    graph = {}
    for name, path in modules.items():
        here = name if path.name == "__init__.py" else name.rpartition(".")[0]
        found = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                found |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = here.split(".")[: len(here.split(".")) - (node.level - 1)]
                    base = ".".join(anchor + ([base] if base else []))
                # `from pkg import mod` imports the module; `from mod import name` imports mod.
                submodules = {f"{base}.{a.name}" for a in node.names} & modules.keys()
                found |= submodules or {base}
        graph[name] = {m for m in found if m in modules}
    return graph


def group_of(module: str) -> str:
    """The table's name for a module: its folder (``backends.local`` for a backend), or itself at the top."""
    parts = module.split(".")[1:]
    if not parts:
        return ""
    if parts[0] == "backends" and len(parts) > 1:
        return f"backends.{parts[1]}"
    return parts[0]


def violations(graph: dict[str, set[str]], layers: dict[str, int]) -> list[str]:
    found = []
    for module, imported in graph.items():
        mine = group_of(module)
        for other in imported:
            theirs = group_of(other)
            if theirs == mine or not mine or not theirs:
                continue
            if layers[theirs] >= layers[mine]:
                found.append(f"{module} (layer {layers[mine]}) imports {other} (layer {layers[theirs]})")
    return sorted(found)


GRAPH = import_graph(PACKAGE)


def test_every_folder_and_top_level_module_has_a_layer():
    assert {group_of(m) for m in GRAPH} - {""} <= LAYERS.keys()


def test_no_import_goes_up_a_layer_or_sideways():
    assert violations(GRAPH, LAYERS) == []


def test_no_import_cycles():
    def reaches(start: str) -> set[str]:
        seen, todo = set(), [start]
        while todo:
            for nxt in GRAPH[todo.pop()] - seen:
                seen.add(nxt)
                todo.append(nxt)
        return seen

    assert sorted(m for m in GRAPH if m in reaches(m)) == []


@pytest.mark.parametrize("statement", [
    "from precision_oat.backends.local import loop\n",
    "from ..backends.local import loop\n",
    "def later():\n    from ..learners import builtin\n",
])
def test_a_planted_violation_is_found(tmp_path, statement):
    package = tmp_path / "precision_oat"
    for folder in ("rl", "learners", "backends", "backends/local"):
        (package / folder).mkdir(parents=True)
        (package / folder / "__init__.py").write_text("")
    (package / "__init__.py").write_text("")
    (package / "learners" / "builtin.py").write_text("")
    (package / "backends" / "local" / "loop.py").write_text("")
    (package / "rl" / "step.py").write_text(statement)
    assert violations(import_graph(package), LAYERS) != []


def test_no_two_modules_or_classes_share_a_name():
    modules, classes = {}, {}
    for path in PACKAGE.rglob("*.py"):
        name = module_name(path, PACKAGE)
        if path.stem not in ("__init__", "__main__"):
            modules.setdefault(path.stem, []).append(name)
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.ClassDef):
                classes.setdefault(node.name, []).append(name)
    assert {k: v for k, v in modules.items() if len(v) > 1} == {}
    assert {k: v for k, v in classes.items() if len(v) > 1} == {}


def test_the_reader_sees_real_imports():
    # Imports inside functions count too (the loop builds DeepSpeed lazily).
    assert "precision_oat.learners.deepspeed_learner" in GRAPH["precision_oat.backends.local.driver"]
    assert "precision_oat.backends.local.driver" in GRAPH["precision_oat.main"]
