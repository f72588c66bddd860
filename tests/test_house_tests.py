"""The house rules of the tests and the benchmarks: what they share lives in lokg.testing (no
test module imports another, nor does a benchmark import the tests); bench/ is a package whose
scripts share one module, bench.common, and never edit sys.path; lokg.testing ships in the
wheel, so importing it pulls neither pytest nor a heavy package, and no product module
imports it."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from lokg.testing import REPO
from lokg.testing.cli import BLOCK_HEAVY

SOURCES = sorted([*(REPO / "tests").rglob("*.py"), *(REPO / "bench").rglob("*.py")])
#: The bench modules a script may import: what scripts share.
BENCH_LIBRARIES = {"bench.common"}


def imports(path: Path) -> set[str]:
    """Every module a file imports anywhere in it (functions included), as written."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.update([node.module, *(f"{node.module}.{a.name}" for a in node.names)])
    return found


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: p.relative_to(REPO).as_posix())
def test_nothing_imports_the_tests(path):
    """Shared stores, dumps, doubles and fixtures come from lokg.testing, not from a test file."""
    assert not {m for m in imports(path) if m == "tests" or m.startswith("tests.")}


@pytest.mark.parametrize("path", sorted((REPO / "bench").glob("*.py")), ids=lambda p: p.name)
def test_a_benchmark_imports_no_other_benchmark_but_the_shared_module(path):
    """Scripts run as ``python -m bench.<name>``; what two of them need is in bench.common."""
    others = {m for m in imports(path) if m.startswith("bench.") and m.count(".") == 1}
    assert others <= BENCH_LIBRARIES, others
    text = path.read_text(encoding="utf-8")
    assert "sys.path" not in text
    assert "python bench/" not in text  # the usage lines say ``python -m bench.<name>``


PRODUCT = sorted(path for folder in ("runtime", "pipeline", "spark_jobs", "training", "text",
                                     "evaluation", "dags") for path in (REPO / folder).rglob("*.py"))


@pytest.mark.parametrize("path", PRODUCT, ids=lambda p: p.relative_to(REPO).as_posix())
def test_the_product_does_not_import_the_testing_module(path):
    """lokg.testing sits above every package: it may import any of them, none imports it."""
    assert not {m for m in imports(path) if m.startswith("lokg.testing")}


def test_bench_is_a_package():
    assert (REPO / "bench" / "__init__.py").is_file()


def test_lokg_testing_imports_neither_pytest_nor_heavy_packages():
    """Each helper module imports pytest, Spark, torch or the server where it uses them; only
    the fixtures plugin needs pytest at import."""
    code = BLOCK_HEAVY + (
        "import importlib, pkgutil, lokg.testing as testing\n"
        "for m in pkgutil.iter_modules(testing.__path__):\n"
        "    if m.name != 'fixtures':\n"
        "        importlib.import_module('lokg.testing.' + m.name)\n"
        "print(sorted({m.split('.')[0] for m in sys.modules}\n"
        "             & {'pytest', '_pytest', 'hypothesis', 'uvicorn', 'fastapi'}))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
