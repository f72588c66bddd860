"""The house rules of the code base, checked: the packages form layers whose imports point
down only, no module imports itself back through others, no module reaches for another
package's private names, no class or module outgrows one concept, every stage is found from its
name, every error has the one root."""

from __future__ import annotations

import ast
import importlib
import inspect
import subprocess
import sys
from pathlib import Path

import pytest

from lokg.pipeline.registry import STAGES
from lokg.pipeline.config import DEFAULTS
from lokg.runtime.errors import LokgError

REPO = Path(__file__).resolve().parents[1]
#: The repository's top folders mapped to ``lokg.<folder>`` (setup.py's FOLDERS).
FOLDERS = ("runtime", "pipeline", "spark_jobs", "training", "text", "evaluation")
#: The packages of ``lokg`` from the top down (``testing``: lokg/testing/, the shared test
#: fixtures, which no product module imports; ``cli``: the module lokg/cli.py, the ``lokg``
#: command's composition root; ``common``: lokg/common/). A package imports only the packages
#: of the rows below its own; the packages of one row import none of each other. Above them
#: all, dags/ imports no lokg module (:func:`test_the_dags_import_no_lokg_module`).
LAYERS = (
    ("testing",),
    ("cli",),
    ("evaluation",),
    ("pipeline",),
    ("spark_jobs", "training", "text"),
    ("common",),
    ("runtime",),
)
RANK = {package: rank for rank, row in enumerate(LAYERS) for package in row}
#: Largest product class and module, in lines (the developers' guide: one concept, one topic).
MAX_CLASS_LINES = 300
MAX_MODULE_LINES = 600
#: Longest product function, in lines from ``def`` to its end, docstring included (the
#: developers' guide: functions that read top to bottom, one screen).
MAX_FUNCTION_LINES = 40


def project_modules() -> dict[str, Path]:
    """Dotted name → file of every module of the ``lokg`` namespace: the ``lokg/`` folder's
    own modules and subpackages and the mapped top folders'."""
    out = {}
    roots = [(REPO / "lokg", ("lokg",))] + [(REPO / f, ("lokg", f)) for f in FOLDERS]
    for root, prefix in roots:
        for path in sorted(root.rglob("*.py")):
            parts = (*prefix, *path.relative_to(root).with_suffix("").parts)
            out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def package(module: str) -> str:
    """The package a module belongs to: ``lokg.<package>...`` (``lokg`` itself: the namespace)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "lokg"


def _is_main_guard(node: ast.AST) -> bool:
    return (isinstance(node, ast.If) and isinstance(node.test, ast.Compare)
            and isinstance(node.test.left, ast.Name) and node.test.left.id == "__name__")


def _imports(tree: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    """The import statements anywhere in a module (functions and ``__main__`` blocks included)."""
    return [node for node in ast.walk(tree) if isinstance(node, (ast.Import, ast.ImportFrom))]


def imported_names(path: Path) -> set[str]:
    """Every dotted name a file imports anywhere in it (functions included): each module, and
    each ``module.name`` of a ``from module import name``."""
    found = set()
    for node in _imports(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif node.module and not node.level:
            found.add(node.module)
            found.update(f"{node.module}.{a.name}" for a in node.names)
    return found


def imported_modules(path: Path, modules: dict[str, Path]) -> set[str]:
    """The project modules a file imports anywhere in it (functions included)."""
    return imported_names(path) & set(modules)


def import_graph() -> dict[str, set[str]]:
    modules = project_modules()
    return {name: imported_modules(path, modules) - {name} for name, path in modules.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in graph:
        if v not in index:
            visit(v)
    return found


def test_no_import_cycles_between_the_projects_modules():
    assert cycles(import_graph()) == []


def test_the_cycle_finder_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_runtime_imports_nothing_of_the_offline_side():
    bad = {m: sorted(i for i in deps if package(i) != "runtime")
           for m, deps in import_graph().items() if package(m) == "runtime"}
    assert {m: d for m, d in bad.items() if d} == {}


def test_every_package_has_its_layer():
    assert {package(m) for m in project_modules()} - {"lokg"} == set(RANK)


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    """``module -> module`` for every import that does not point to a lower layer (or stay
    in its own package)."""
    return [f"{m} -> {d}" for m, deps in sorted(graph.items()) for d in sorted(deps)
            if package(m) != package(d) and RANK.get(package(d), -1) <= RANK.get(package(m), -1)]


def test_every_package_imports_only_the_layers_below_it():
    """Every import counts, functions' and ``if __name__ == "__main__":`` blocks' included: a
    stage has no command line of its own, ``pipeline/stage_launcher.py`` runs any by name."""
    upward = upward_imports(import_graph())
    assert not upward, "imports that do not point down:\n" + "\n".join(upward)


def test_the_layer_check_finds_an_upward_import():
    graph = {"lokg.runtime.a": {"lokg.common.b"}, "lokg.common.b": {"lokg.runtime.c"},
             "lokg.text.d": {"lokg.training.e", "lokg.text.f"}, "lokg.cli": {"lokg.text.d"}}
    assert upward_imports(graph) == ["lokg.runtime.a -> lokg.common.b",
                                     "lokg.text.d -> lokg.training.e"]


def test_the_namespace_itself_imports_nothing():
    assert import_graph()["lokg"] == set()


def test_no_loop_between_packages():
    graph: dict[str, set[str]] = {}
    for m, deps in import_graph().items():
        graph.setdefault(package(m), set()).update(package(d) for d in deps)
    assert cycles({p: deps - {p} for p, deps in graph.items()}) == []


def test_the_dags_import_no_lokg_module():
    """The DAGs run in the Airflow venv without lokg: they load pipeline/registry.py from its
    file (dags/lokg_common.py) and run everything else as commands."""
    found = [f"{path.name}: {name}" for path in sorted((REPO / "dags").glob("*.py"))
             for name in sorted(imported_names(path)) if name.split(".")[0] == "lokg"]
    assert found == []


def private_uses(module: str, modules: dict[str, Path]) -> list[str]:
    """The private names (``_x``) of another package a module uses: imported by name, or
    read as an attribute of an imported module."""
    own = package(module)
    tree = ast.parse(modules[module].read_text(encoding="utf-8"))
    aliases, found = {}, []
    for node in _imports(tree):
        if isinstance(node, ast.Import):
            aliases.update({a.asname: a.name for a in node.names if a.asname})
        elif node.module in modules and not node.level:
            for a in node.names:
                name = f"{node.module}.{a.name}"
                if name in modules:
                    aliases[a.asname or a.name] = name
                elif a.name.startswith("_") and package(node.module) != own:
                    found.append(name)
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                and node.attr.startswith("_") and not node.attr.startswith("__"):
            module = aliases.get(node.value.id)
            if module is not None and package(module) != own:
                found.append(f"{module}.{node.attr}")
    return found


def test_no_package_uses_another_packages_private_names():
    modules = project_modules()
    bad = {m: private_uses(m, modules) for m in modules}
    assert not any(bad.values()), "\n".join(f"{m}: {', '.join(uses)}"
                                         for m, uses in bad.items() if uses)


def oversized() -> list[str]:
    """Product modules over :data:`MAX_MODULE_LINES` lines and classes over
    :data:`MAX_CLASS_LINES`, with their sizes."""
    found = []
    for name, path in project_modules().items():
        source = path.read_text(encoding="utf-8")
        lines = len(source.splitlines())
        if lines > MAX_MODULE_LINES:
            found.append(f"module {name}: {lines} lines")
        for node in ast.walk(ast.parse(source)):
            size = getattr(node, "end_lineno", 0) - getattr(node, "lineno", 0) + 1
            if isinstance(node, ast.ClassDef) and size > MAX_CLASS_LINES:
                found.append(f"class {name}.{node.name}: {size} lines")
    return found


def test_no_product_class_or_module_outgrows_one_concept():
    """Classes of at most 300 lines, modules of at most 600 (bench/ and tests/ aside)."""
    found = oversized()
    assert not found, (f"{len(found)} over the limits (class {MAX_CLASS_LINES}, module "
                       f"{MAX_MODULE_LINES} lines):\n" + "\n".join(found))


def overlong_functions() -> list[str]:
    """Product functions and methods (lokg/testing included) over :data:`MAX_FUNCTION_LINES`
    lines, with their lengths."""
    found = []
    for name, path in project_modules().items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                size = node.end_lineno - node.lineno + 1
                if size > MAX_FUNCTION_LINES:
                    found.append(f"{name}:{node.lineno} {node.name}: {size} lines")
    return found


def test_no_product_function_outgrows_one_screen():
    """Functions of at most 40 lines, from ``def`` to the end (bench/ and tests/ aside)."""
    found = overlong_functions()
    assert not found, (f"{len(found)} functions over {MAX_FUNCTION_LINES} lines:\n"
                       + "\n".join(found))


BLOCKED = ("lokg.cli", "lokg.pipeline", "lokg.evaluation", "lokg.training", "lokg.spark_jobs",
           "lokg.text", "lokg.common", "pyspark", "torch", "airflow", "sentence_transformers",
           "transformers")
IMPORT_ALL = f"""
import importlib, sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {BLOCKED!r} or ".".join(name.split(".")[:2]) in {BLOCKED!r}:
            raise ImportError("blocked: " + name)
sys.meta_path.insert(0, Block())
for name in sys.argv[1:]:
    importlib.import_module(name)
print("OK")
"""


def test_every_runtime_module_imports_with_the_offline_side_blocked():
    names = [m for m in project_modules() if package(m) == "runtime"]
    proc = subprocess.run([sys.executable, "-c", IMPORT_ALL, *names], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "OK" in proc.stdout, proc.stderr[-3000:]


@pytest.mark.parametrize("stage", STAGES, ids=lambda s: s.name)
def test_a_stage_is_its_module_and_its_config_section(stage):
    path = REPO / stage.package / f"{stage.name}.py"
    assert path.is_file(), f"stage {stage.name}: no {path}"
    assert stage.name in DEFAULTS, f"stage {stage.name}: no config section of that name"
    source = path.read_text(encoding="utf-8")
    assert "def run(config" in source
    assert not any(_is_main_guard(node) for node in ast.parse(source).body), \
        f"stage {stage.name}: a command line of its own (pipeline/stage_launcher.py runs it)"


def test_no_module_shadows_the_standard_library():
    names = {p.stem for p in project_modules().values()}
    assert not names & set(sys.stdlib_module_names) - {"__init__"}


def test_every_project_error_has_the_one_root():
    errors = []
    for name in project_modules():
        module = importlib.import_module(name)
        errors += [c for _, c in inspect.getmembers(module, inspect.isclass)
                   if issubclass(c, Exception) and c.__module__ == name
                   and not c.__name__.startswith("_")]
    assert errors, "no error classes found"
    assert [c.__qualname__ for c in errors if not issubclass(c, LokgError)] == []


def test_ask_reads_as_one_chain_of_short_steps():
    """``Runtime.ask`` is the chain check → link → plan → retrieve → encode → read → answer."""
    from lokg.runtime.query import Runtime

    lines = inspect.getsource(Runtime.ask).splitlines()
    assert len(lines) <= 40, f"Runtime.ask is {len(lines)} lines"
    body = "\n".join(lines)
    steps = [body.index(f"{step}(") for step in
             ("checked_request", "self._link", ".plan", ".retrieve", ".encode", ".read",
              "read_answer")]
    assert steps == sorted(steps)
