"""The layers point one way: import graph checks over the package's own source (AST, no import)."""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "cpbcg"
COMMANDS = {"plan_cmd", "layout_cmd", "batches_cmd", "replay_check_cmd", "capture_cmd", "presets_cmd"}


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def top_level_imports(path: Path) -> set[str]:
    """Modules of the package imported when `path` is imported (module level, not under
    `if TYPE_CHECKING:`, not inside functions)."""
    tree = ast.parse(path.read_text())
    package = module_name(path) if path.name == "__init__.py" else module_name(path).rpartition(".")[0]
    out: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            continue
        for sub in ast.walk(node) if isinstance(node, (ast.If, ast.Try)) else [node]:
            if isinstance(sub, ast.Import):
                out |= {a.name for a in sub.names if a.name.startswith("cpbcg")}
            elif isinstance(sub, ast.ImportFrom):
                base = sub.module or ""
                if sub.level:
                    base = ".".join(package.split(".")[: len(package.split(".")) - sub.level + 1] + ([base] if base else []))
                if base.startswith("cpbcg"):
                    submodules = {f"{base}.{a.name}" for a in sub.names} & KNOWN
                    out |= submodules if len(submodules) == len(sub.names) else submodules | {base}
    return out


MODULES = {module_name(p): p for p in PACKAGE.rglob("*.py")}
KNOWN = set(MODULES)
GRAPH = {name: {m for m in top_level_imports(path) if m in MODULES and m != name} for name, path in MODULES.items()}


def test_no_import_cycle():
    state: dict[str, int] = {}

    def visit(node: str, stack: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(GRAPH[node]):
            if state.get(nxt) == 1:
                pytest.fail("import cycle: " + " -> ".join(stack[stack.index(nxt):] + [nxt]) if nxt in stack else nxt)
            if nxt not in state:
                visit(nxt, stack + [nxt])
        state[node] = 2

    for name in sorted(GRAPH):
        if name not in state:
            visit(name, [name])


@pytest.mark.parametrize("name", sorted(n for n in MODULES if n.startswith("cpbcg.planner")))
def test_planner_imports_only_the_planner_and_errors(name):
    outside = {m for m in GRAPH[name] if not (m.startswith("cpbcg.planner") or m == "cpbcg.errors")}
    assert not outside, f"{name} imports {sorted(outside)}"


@pytest.mark.parametrize("name", sorted(n for n in MODULES if n.rpartition(".")[2] in COMMANDS))
def test_no_command_module_imports_another(name):
    path = MODULES[name]
    every = {n.module for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.ImportFrom) and n.module}
    others = {m for m in every if m.rpartition(".")[2] in COMMANDS and m != name}
    assert not others, f"{name} imports the command module(s) {sorted(others)}"


def test_importing_the_planner_loads_no_heavy_dependency():
    code = (
        "import sys, cpbcg.planner, cpbcg.planner.plan, cpbcg.planner.optimise.recommend, cpbcg.planner.optimise.optimiser; "
        "print(sorted(m for m in ('pydantic', 'yaml', 'typer', 'rich', 'torch', 'matplotlib') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_help_loads_neither_numpy_nor_the_planner():
    code = (
        "import sys; from cpbcg.cli import main\n"
        "for argv in (['--help'], ['plan', '--help'], ['replay-check', '--help'], ['batches', '--help']):\n"
        "    try: main(argv)\n"
        "    except SystemExit: pass\n"
        "print(sorted(m for m in ('numpy', 'yaml', 'orjson', 'cpbcg.planner.model.layout', 'cpbcg.config') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip().splitlines()[-1] == "[]"


def test_every_source_folder_is_a_package():
    # setuptools' find_packages skips folders without __init__.py: `pip install .` would drop them
    folders = {p.parent for p in PACKAGE.rglob("*.py")}
    assert sorted(str(f) for f in folders if not (f / "__init__.py").exists()) == []
