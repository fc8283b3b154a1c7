"""The layers point one way: import graph checks over the package's own source (AST, no import)."""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "cpbcg"
COMMANDS = {path.stem for path in (Path(__file__).parent.parent / "cpbcg" / "cli").glob("*_cmd.py")}
"""Every command module of the CLI (`cpbcg/cli/<name>_cmd.py`): a new command is covered without a list to update."""


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _resolve(node: ast.ImportFrom | ast.Import, package: str) -> set[str]:
    """The package's own modules an import statement names."""
    if isinstance(node, ast.Import):
        return {a.name for a in node.names if a.name.startswith("cpbcg")}
    base = node.module or ""
    if node.level:
        base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else []))
    if not base.startswith("cpbcg"):
        return set()
    submodules = {f"{base}.{a.name}" for a in node.names} & KNOWN
    return submodules if len(submodules) == len(node.names) else submodules | {base}


def _package(path: Path) -> str:
    return module_name(path) if path.name == "__init__.py" else module_name(path).rpartition(".")[0]


def top_level_imports(path: Path) -> set[str]:
    """Modules of the package imported when `path` is imported (module level, not under
    `if TYPE_CHECKING:`, not inside functions)."""
    tree = ast.parse(path.read_text())
    out: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            continue
        for sub in ast.walk(node) if isinstance(node, (ast.If, ast.Try)) else [node]:
            if isinstance(sub, (ast.Import, ast.ImportFrom)):
                out |= _resolve(sub, _package(path))
    return out


def all_imports(path: Path, *, type_checking: bool = True) -> set[str]:
    """Modules of the package that `path` imports at any level: module level, inside functions
    and methods (imported when called), and with `type_checking` under `if TYPE_CHECKING:`."""
    tree = ast.parse(path.read_text())
    skipped: set[int] = set()
    if not type_checking:
        for node in ast.walk(tree):
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                skipped |= {id(sub) for stmt in node.body for sub in ast.walk(stmt)}
    return {m for node in ast.walk(tree) if isinstance(node, (ast.Import, ast.ImportFrom)) and id(node) not in skipped
            for m in _resolve(node, _package(path))}


UNTIL_MOVED: set[tuple[str, str]] = set()
"""Planner -> engine imports left while a move is under way, (importer, imported): none (issue 39
moved SGLang 0.5.23's start-up resolution into `cpbcg/engines/sglang/startup/`; the planner keeps
its result types). `test_the_pending_engine_imports_still_exist` fails once an entry is stale."""

MODULES = {module_name(p): p for p in PACKAGE.rglob("*.py")}
KNOWN = set(MODULES)
GRAPH = {name: {m for m in top_level_imports(path) if m in MODULES and m != name} for name, path in MODULES.items()}
"""Imports made when a module is imported."""
FULL_GRAPH = {name: {m for m in all_imports(path, type_checking=False) if m in MODULES and m != name and (name, m) not in UNTIL_MOVED}
              for name, path in MODULES.items()}
"""Imports made at run time at any level (function-level imports included)."""
EVERY_IMPORT = {name: {m for m in all_imports(path) if m != name and (name, m) not in UNTIL_MOVED} for name, path in MODULES.items()}
"""Every import, `if TYPE_CHECKING:` included (names a type only, but is still a dependency)."""

CLI_MAY_IMPORT = {"cpbcg", "cpbcg.api", "cpbcg.commands", "cpbcg.outputs", "cpbcg.errors", "cpbcg.atomic", "cpbcg.settings",
                  "cpbcg.engines.sglang.release"}
"""What a command module may import besides `cpbcg.cli.*`, `cpbcg.commands.*` and `cpbcg.outputs.*`
(the JSON documents and the notes among them): the API door, the error tree, atomic outputs and
what `--help` needs: the light settings declarations and the release modelled (a constant; the
engine's declarations read `cpbcg.settings`, so the settings cannot name the release)."""


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}

    def visit(node: str, stack: list[str]) -> list[str] | None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt] if nxt in stack else [nxt]
            if nxt not in state:
                found = visit(nxt, stack + [nxt])
                if found:
                    return found
        state[node] = 2
        return None

    for name in sorted(graph):
        if name not in state:
            found = visit(name, [name])
            if found:
                return found
    return None


def _package_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """Modules merged into their top packages (`cpbcg.planner`, `cpbcg.cli`, `cpbcg.api`, ...)."""
    def top(name: str) -> str:
        return ".".join(name.split(".")[:2])

    merged: dict[str, set[str]] = {}
    for name, targets in graph.items():
        merged.setdefault(top(name), set()).update(top(t) for t in targets if top(t) != top(name) and top(t) != "cpbcg")
    return {name: targets & set(merged) for name, targets in merged.items()}


def test_no_import_cycle():
    cycle = _cycle(GRAPH)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_no_import_cycle_at_any_level():
    # function-level imports too: `inputs` importing `yaml_input` inside a function while
    # `yaml_input` imports `inputs` is a cycle, only hidden from the module-level graph
    cycle = _cycle(FULL_GRAPH)
    assert cycle is None, "import cycle (function-level imports included): " + " -> ".join(cycle or [])


def test_the_function_level_scan_sees_imports_inside_functions():
    # the scan must see what the old top-level-only scan missed: a command importing inside its body
    assert "cpbcg.commands.layout" in all_imports(MODULES["cpbcg.cli.layout_cmd"]) - top_level_imports(MODULES["cpbcg.cli.layout_cmd"])


@pytest.mark.parametrize("name", sorted(n for n in MODULES if n.startswith("cpbcg.cli")))
def test_commands_go_through_the_api_only(name):
    outside = {m for m in EVERY_IMPORT[name] if not m.startswith(("cpbcg.cli", "cpbcg.commands.", "cpbcg.outputs.")) and m not in CLI_MAY_IMPORT}
    assert not outside, f"{name} imports {sorted(outside)} (at some level): go through cpbcg.api"


@pytest.mark.parametrize("name", sorted(n for n in MODULES if n.startswith("cpbcg.planner")))
def test_planner_imports_only_the_planner_and_errors(name):
    outside = {m for m in EVERY_IMPORT[name] if not (m.startswith("cpbcg.planner") or m == "cpbcg.errors")}
    assert not outside, f"{name} imports {sorted(outside)} (at some level): the planner reads no files and imports no YAML"


def test_the_pending_engine_imports_still_exist():
    assert all(name in MODULES and m in all_imports(MODULES[name]) for name, m in UNTIL_MOVED), "UNTIL_MOVED is stale: empty it"


def test_no_planner_module_reads_an_input_file():
    for name, path in MODULES.items():
        if not name.startswith("cpbcg.planner"):
            continue
        tree = ast.parse(path.read_text())
        external = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        external |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
        # nor writes one: bucket files (YAML) are written by cpbcg.bucket_files
        banned = {"pydantic", "yaml", "cpbcg.inputs", "cpbcg.config", "cpbcg.yaml_input"}
        assert not external & banned, f"{name} imports {sorted(external & banned)}"


def test_layers_point_down_between_packages():
    # cli -> api -> (check, capture, config, manifest, documents, notes) -> planner; never back up
    order = ["cpbcg.cli", "cpbcg.commands", "cpbcg.outputs", "cpbcg.api", "cpbcg.watching", "cpbcg.gates", "cpbcg.graph_capture", "cpbcg.assembly",
             "cpbcg.engines", "cpbcg.planner"]
    graph = _package_graph(FULL_GRAPH)
    for i, upper in enumerate(order):
        for lower in order[i + 1:]:
            assert upper not in graph.get(lower, set()), f"{lower} imports {upper}"


@pytest.mark.parametrize("name", sorted(n for n in MODULES if n.rpartition(".")[2] in COMMANDS))
def test_no_command_module_imports_another(name):
    path = MODULES[name]
    every = {n.module for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.ImportFrom) and n.module}
    others = {m for m in every if m.rpartition(".")[2] in COMMANDS and m != name}
    assert not others, f"{name} imports the command module(s) {sorted(others)}"


def test_importing_the_planner_loads_no_heavy_dependency():
    code = (
        "import sys, cpbcg.planner, cpbcg.assembly.plan, cpbcg.planner.optimise.recommend, cpbcg.planner.optimise.optimiser; "
        "print(sorted(m for m in ('pydantic', 'yaml', 'typer', 'rich', 'torch', 'matplotlib') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_the_planner_loads_neither_yaml_nor_numba_until_the_compiled_loop_is_needed():
    # numba (which imports PyYAML) is the request simulation's compiled loop, imported by
    # `simulation` only when a request trace runs it; every other planner module imports neither
    code = (
        "import sys, importlib, pkgutil, cpbcg.planner\n"
        "names = sorted(m.name for m in pkgutil.walk_packages(cpbcg.planner.__path__, 'cpbcg.planner.'))\n"
        "for name in names:\n"
        "    if name != 'cpbcg.planner.scheduler.kernel': importlib.import_module(name)\n"
        "print(len(names), sorted(m for m in ('numba', 'yaml', 'cpbcg.planner.scheduler.kernel') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    count, loaded = out.stdout.strip().split(" ", 1)
    assert int(count) > 50 and loaded == "[]"


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


def test_every_public_name_is_what_the_readme_documents_even_after_its_neighbours_load():
    # `cpbcg.check` once became the `cpbcg.check` gates package as soon as anything imported it
    # (`TypeError: 'module' object is not callable`); no public name may share a subpackage's name
    code = (
        "import types, cpbcg, cpbcg.api, cpbcg.gates.gates, cpbcg.watching.session, cpbcg.graph_capture, cpbcg.assembly.plan\n"
        "print(sorted(n for n in cpbcg.__all__ if n != '__version__' and isinstance(getattr(cpbcg, n), types.ModuleType)), "
        "callable(cpbcg.check), callable(cpbcg.watch), cpbcg.check.__module__)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[] True True cpbcg.api"
    subpackages = {p.parent.name for p in PACKAGE.glob("*/__init__.py")}
    import cpbcg

    assert not subpackages & set(cpbcg.__all__), "a public name is also a subpackage: importing it replaces the function"


def _defined_in_api() -> set[str]:
    tree = ast.parse(MODULES["cpbcg.api"].read_text())
    names = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    names |= {t.id for n in tree.body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)}
    return names | {n.target.id for n in tree.body if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)}


def test_the_api_is_a_facade_without_re_exports():
    # api.py once re-exported 34 of its 67 names: a name lives with the code that makes it, and
    # nothing reaches it through `cpbcg.api` (types, CI reports, words ... come from their owners)
    import cpbcg.api

    defined = _defined_in_api()
    assert set(cpbcg.api.__all__) <= defined, sorted(set(cpbcg.api.__all__) - defined)
    through = set()
    for name, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module == "cpbcg.api":
                through |= {f"{name}: {a.name}" for a in node.names if a.name not in defined}
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "api" and node.attr not in defined:
                through.add(f"{name}: api.{node.attr}")
    assert not through, sorted(through)


def test_every_public_name_comes_from_the_module_that_defines_it():
    import cpbcg

    for name in cpbcg.__all__:
        if name == "__version__":
            continue
        value = getattr(cpbcg, name)
        assert value.__module__ == cpbcg._EXPORTS[name], (name, value.__module__)


EDGE = ["cpbcg.cli", "cpbcg.commands", "cpbcg.outputs", "cpbcg.api"]
"""The edge's layers, top down: the CLI parses into a command's options type and calls its use
case (`cpbcg.commands`), the report goes to an output (`cpbcg.outputs`), all of it over the library
facade (`cpbcg.api`) and the planner below."""


def test_the_edge_layers_point_down_type_only_imports_included():
    # an output renders a command's report through a Protocol of what it reads, never by naming
    # the command's type (a type-only import is still a dependency, and here a cycle)
    graph = _package_graph(EVERY_IMPORT)
    below = ["cpbcg.watching", "cpbcg.gates", "cpbcg.graph_capture", "cpbcg.assembly", "cpbcg.engines", "cpbcg.planner", "cpbcg.config", "cpbcg.manifest", "cpbcg.inputs",
             "cpbcg.bucket_files", "cpbcg.settings"]
    for i, upper in enumerate(EDGE):
        for lower in EDGE[i + 1:] + below:
            assert upper not in graph.get(lower, set()), f"{lower} imports {upper} (type-only imports included)"


def test_outputs_write_through_the_console_only():
    # every rendering goes through one writer interface (`cpbcg.outputs.console`: echo, write_bytes,
    # print_json, the consoles): no output imports typer or writes to a stream itself
    for name, path in MODULES.items():
        if not name.startswith("cpbcg.outputs.") or name == "cpbcg.outputs.console":
            continue
        tree = ast.parse(path.read_text())
        imported = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        imported |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
        assert "typer" not in imported and "click" not in imported, f"{name} imports typer: write through cpbcg.outputs.console"
        streams = sorted({ast.unparse(n) for n in ast.walk(tree) if isinstance(n, ast.Attribute) and ast.unparse(n) in ("sys.stdout", "sys.stderr")}
                         | {"print()" for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "print"})
        assert not streams, f"{name} writes to {streams} itself: write through cpbcg.outputs.console"


def test_every_rendering_lives_in_outputs():
    # the JSON documents and the notes' words are renderings: no module of them outside cpbcg/outputs/
    assert not {"cpbcg.documents", "cpbcg.notes", "cpbcg.commands.trace_input"} & set(MODULES)
    assert {"cpbcg.outputs.documents", "cpbcg.outputs.notes"} <= set(MODULES)


def test_each_command_has_its_use_case_module():
    commands = {p.stem for p in (PACKAGE / "commands").glob("*.py")} - {"__init__"}
    assert {"plan", "replay_check", "batches", "layout", "presets", "check_server", "watch", "capture"} <= commands


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected component of more than one node (Tarjan), each sorted: the cycles."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for name in sorted(graph):
        if name not in index:
            visit(name)
    return sorted(found)


def _unit(name: str) -> str:
    """A module's unit: its top package (`cpbcg.api`, `cpbcg.gates`), or inside the planner its
    wing's package or module (`cpbcg.planner.model`, `cpbcg.planner.deployment`)."""
    parts = name.split(".")
    return ".".join(parts[:3] if parts[:2] == ["cpbcg", "planner"] and len(parts) > 2 else parts[:2])


def _unit_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    merged: dict[str, set[str]] = {}
    for name, targets in graph.items():
        merged.setdefault(_unit(name), set()).update(_unit(t) for t in targets if t in MODULES and _unit(t) != _unit(name) and t != "cpbcg")
    return merged


def test_no_import_cycle_counting_type_only_imports():
    # `if TYPE_CHECKING:` imports are dependencies too: a pair of modules naming each other's
    # types cannot be understood, tested or moved apart (issue 28)
    assert _cycles({n: {m for m in t if m in MODULES} for n, t in EVERY_IMPORT.items()}) == []


def test_no_package_cycle_counting_type_only_imports():
    assert _cycles(_unit_graph(EVERY_IMPORT)) == []


def test_the_cycle_check_sees_type_only_imports():
    # the check must count what `test_no_import_cycle_at_any_level` skips: a cycle made only of
    # an `if TYPE_CHECKING:` import is found
    graph = {n: set(t) for n, t in EVERY_IMPORT.items()}
    graph["cpbcg.planner.model.batches"] = graph["cpbcg.planner.model.batches"] | {"cpbcg.planner.traces.records"}
    assert ["cpbcg.planner.model", "cpbcg.planner.traces"] in _cycles(_unit_graph(graph))


PLANNER_WINGS = [
    ("base", {"arrays", "choices", "words", "document", "hardware", "decode_steps"}),
    ("model", {"model"}),
    ("traces", {"traces"}),
    ("scheduler", {"scheduler"}),
    ("evaluate", {"evaluate", "demand_log", "sampling", "background", "bound"}),
    ("costs", {"costs"}),
    ("deployment", {"deployment"}),
    ("optimise", {"optimise"}),
]
"""The planner's wings, bottom first (docs/architecture.md "The planner's wings"): a wing imports
only the wings below it (at any level, type-only imports included). The CP model is the bottom;
the trace readers build on its `BatchSet`; the scheduler turns the readers' requests into
forwards; evaluation (with the bound of forwards known by size) and the cost models; the
deployment; the optimiser on top. What joins readers, scheduler and an engine into a plan is
above the engines (`cpbcg.assembly`)."""
WING_OF = {f"cpbcg.planner.{part}": rank for rank, (_, parts) in enumerate(PLANNER_WINGS) for part in parts}


def test_every_planner_module_is_in_a_wing():
    units = {_unit(n) for n in MODULES if n.startswith("cpbcg.planner.")}
    assert sorted(units - set(WING_OF)) == []


@pytest.mark.parametrize("upper, lower", [(u, low) for u, targets in sorted(_unit_graph(EVERY_IMPORT).items()) if u in WING_OF
                                         for low in sorted(targets) if low in WING_OF])
def test_planner_wings_point_down(upper, lower):
    assert WING_OF[lower] <= WING_OF[upper], \
        f"{upper} (wing {PLANNER_WINGS[WING_OF[upper]][0]}) imports {lower} (wing {PLANNER_WINGS[WING_OF[lower]][0]}, above it)"


def test_readers_need_only_the_forwards_shape_of_the_model():
    # the trace readers know `BatchSet` (model/batches.py) and nothing of CP, scheduling or assembly
    used = {m for n, t in EVERY_IMPORT.items() if _unit(n) == "cpbcg.planner.traces" for m in t if m in MODULES}
    outside = {m for m in used if _unit(m) not in ("cpbcg.planner.traces", "cpbcg.planner.arrays", "cpbcg.planner.choices", "cpbcg.errors")}
    assert outside == {"cpbcg.planner.model.batches"}
