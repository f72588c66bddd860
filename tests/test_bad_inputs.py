"""Every bad input of issue 21 (items 3-9), as the user meets it on the command line: the exit
code, no Python traceback, and a message naming the input.

One row per input: ``make(tmp)`` writes what the row needs and returns the ``lokg`` arguments
and the strings the output must hold. Rows run through click's CliRunner; ``spark`` rows need
the session fixture (the build's stages find it active), ``process`` rows run the installed
``lokg`` in a subprocess, where what the JVM prints counts too.
"""

from __future__ import annotations

import gzip
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner

from lokg.cli import cli
from lokg.runtime.contract import read_table
from lokg.testing import REPO
from lokg.testing.cli import assert_clean_error
from lokg.testing.stores import make_store

QUESTION = "Who directed the sequel of The Long Road?"


@dataclass(frozen=True)
class Case:
    """``make(tmp) -> (args, names)``; ``then(tmp)`` checks what the command left behind."""

    make: Callable[[Path], tuple[list[str], list[str]]]
    code: int = 1
    runner: str = "cli"  # cli | spark | process
    then: Callable[[Path], None] | None = None


def _store(tmp: Path, build_id: str = "b1") -> Path:
    return make_store(tmp, build_id=build_id).root


def rollback_outside(tmp: Path):
    root = _store(tmp)
    make_store(tmp / "elsewhere", build_id="b9")
    target = "../../elsewhere/store/builds/b9"
    return ["store", "rollback", target, "--store", str(root)], [target]


def lone_surrogate(tmp: Path):
    root = _store(tmp)
    return ["query", QUESTION + " \udcff", "--store", str(root)], ["question", "U+DCFF"]


def current_not_utf8(tmp: Path):
    root = _store(tmp)
    (root / "CURRENT").write_bytes(b"b1\xff\n")
    return ["store", "list", "--store", str(root)], [str(root / "CURRENT"), "not UTF-8"]


def bad_manifest(tmp: Path):
    root = _store(tmp, "b1")
    make_store(tmp, build_id="b2")
    manifest = root / "builds" / "b1" / "manifest.json"
    manifest.write_text("{not json")
    return ["store", "list", "--store", str(root)], [f"! b1  unreadable: {manifest}", "* b2  "]


def empty_answer_budget(tmp: Path):
    root = _store(tmp)
    args = ["query", "Who lives on xyzzy?", "--budget", "2048", "--store", str(root)]
    return args, ["no_entity", "knowledge 0 of budget 2048"]


def serve_short_help(tmp: Path):
    return ["serve", "-h"], ["Usage: lokg serve", "LOKG_API_TOKEN"]


def publish_unknown(tmp: Path):
    root = _store(tmp)
    return ["publish", "--build-id", "nosuch", "--store", str(root)], [
        "no such staged build", str(root / "staging" / "nosuch")]


def truncated_gzip(tmp: Path):
    lines = b"".join(b"<http://x/e%d> <http://x/r> <http://x/e%d> .\n" % (i, i + 1)
                     for i in range(5000))
    data = gzip.compress(lines)
    dump = tmp / "kg.nt.gz"
    dump.write_bytes(data[: len(data) // 2])
    args = ["build", "--dump", str(dump), "--store", str(tmp / "store"), "--until", "ingest"]
    return args, [f"cannot read {dump}", "truncated or corrupt"]


def invalid_utf8_statement(tmp: Path):
    dump = tmp / "kg.nt"
    dump.write_bytes(b"<http://x/a> <http://x/r> <http://x/b> .\n"
                     b'<http://x/a> <http://x/name> "caf\xe9" .\n'
                     b"<http://x/b> <http://x/r> <http://x/c> .\n")
    kept = tmp / "store" / "staging" / "b1" / "failed" / "ingest" / "quarantine.parquet"
    args = ["build", "--dump", str(dump), "--store", str(tmp / "store"), "--build-id", "b1",
            "--until", "ingest"]
    return args, ["1 of 3 lines are malformed", f"see the quarantine at {kept}", "invalid UTF-8"]


def quarantine_kept_and_readable(tmp: Path) -> None:
    kept = tmp / "store" / "staging" / "b1" / "failed" / "ingest" / "quarantine.parquet"
    rows = read_table(kept, "quarantine").to_pylist()
    assert [(r["line"], r["reason"].split(" (")[0], r["text"]) for r in rows] == [
        (2, "invalid UTF-8", '<http://x/a> <http://x/name> "caf\ufffd" .')]


CASES = {
    "3 store rollback outside the store": Case(rollback_outside),
    "5 question with a lone surrogate": Case(lone_surrogate),
    "5 CURRENT not UTF-8": Case(current_not_utf8),
    "5 store list with a bad manifest": Case(bad_manifest),
    "5 truncated .nt.gz": pytest.param(Case(truncated_gzip, runner="process"),
                                       marks=pytest.mark.spark),
    "4+7 invalid UTF-8 in a statement, quarantine kept": pytest.param(
        Case(invalid_utf8_statement, runner="spark", then=quarantine_kept_and_readable),
        marks=pytest.mark.spark),
    "9 empty answer reports the budget asked": Case(empty_answer_budget, code=0),
    "9 serve -h": Case(serve_short_help, code=0),
    "9 publish of an unknown build id": Case(publish_unknown),
}


def _lokg_process(args: list[str], tmp: Path) -> tuple[str, int]:
    """The installed ``lokg`` with this checkout's code; stdout and stderr together."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run([str(Path(sys.executable).parent / "lokg"), *args], cwd=tmp, env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=600)
    return proc.stdout, proc.returncode


@pytest.mark.parametrize("case", list(CASES.values()), ids=list(CASES))
def test_bad_input_is_one_clear_error(case: Case, tmp_path, request):
    args, names = case.make(tmp_path)
    if case.runner == "process":
        output, code = _lokg_process(args, tmp_path)
    else:
        if case.runner == "spark":
            request.getfixturevalue("spark")
        result = CliRunner().invoke(cli, args)
        output, code = result.output, result.exit_code
    assert_clean_error(output, code, case.code, *names)
    if case.then is not None:
        case.then(tmp_path)
