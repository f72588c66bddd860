"""The house rules of the code base, checked: imports point one way, no module imports itself
back through others, every stage is found from its name, every error has the one root."""

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
PACKAGES = ("runtime", "pipeline", "spark_jobs", "training", "text", "evaluation")


def project_modules() -> dict[str, Path]:
    """Dotted name → file of every module of the project's packages."""
    out = {}
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            parts = path.relative_to(REPO).with_suffix("").parts
            out[".".join(("lokg", *(parts[:-1] if parts[-1] == "__init__" else parts)))] = path
    return out


def imported_modules(path: Path, modules: dict[str, Path]) -> set[str]:
    """The project modules a file imports anywhere in it (functions included)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module)
            found.update(f"{node.module}.{a.name}" for a in node.names)
    return {m for m in found if m in modules}


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
    offline = ("pipeline", "spark_jobs", "training", "text", "evaluation")
    bad = {m: sorted(i for i in deps if i.split(".")[1] in offline)
           for m, deps in import_graph().items() if m.split(".")[1] == "runtime"}
    assert {m: d for m, d in bad.items() if d} == {}


BLOCKED = ("lokg.pipeline", "lokg.evaluation", "lokg.training", "lokg.spark_jobs", "lokg.text",
           "pyspark", "torch", "airflow", "sentence_transformers", "transformers")
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
    names = [m for m in project_modules() if m.split(".")[1] == "runtime"]
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
    assert f'stage_main("{stage.name}")' in source or f'STAGE = "{stage.name}"' in source


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
    steps = [body.index(f"self.{step}(") for step in
             ("_check", "_link", "_plan", "_retrieve", "_encode", "_read", "_answer")]
    assert steps == sorted(steps)
