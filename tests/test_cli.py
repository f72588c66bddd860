"""The lokg command line: help everywhere, store list/verify/rollback, thin imports."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from lokg.cli import cli
from lokg.runtime.contract import Store, read_table
from lokg.runtime.tokens import BPE_CACHE_KEY
from lokg.testing import REPO
from lokg.testing.cli import BLOCK_HEAVY, assert_clean_error
from lokg.testing.stores import publish_stage_tables as _publish

COMMANDS = [[], ["synth"], ["build"], ["publish"], ["demo"], ["config"], ["query"], ["serve"],
            ["store"], ["store", "list"], ["store", "verify"], ["store", "rollback"],
            ["store", "show"], ["store", "gc"], ["scos-report"]]


@pytest.mark.parametrize("flag", ["--help", "-h"])
@pytest.mark.parametrize("args", COMMANDS, ids=lambda a: " ".join(a) or "lokg")
def test_every_command_has_help(args, flag):
    result = CliRunner().invoke(cli, [*args, flag])
    assert result.exit_code == 0, result.output
    assert "Usage: " in result.output and "--help" in result.output


def test_store_commands_round_trip(tmp_path):
    store = Store(tmp_path / "store")
    _publish(store, tmp_path, "b1")
    b2 = _publish(store, tmp_path, "b2")
    runner = CliRunner()
    root = ["--store", str(store.root)]

    listed = runner.invoke(cli, ["store", "list", *root])
    assert listed.exit_code == 0
    assert listed.output.splitlines()[0].startswith("  b1")
    assert listed.output.splitlines()[1].startswith("* b2")

    ok = runner.invoke(cli, ["store", "verify", *root])
    assert ok.exit_code == 0 and "ok: build b2" in ok.output

    target = b2.path / "relations.parquet"
    target.write_bytes(target.read_bytes()[:-3] + b"xyz")
    bad = runner.invoke(cli, ["store", "verify", *root])
    assert bad.exit_code != 0
    assert str(target) in bad.output

    back = runner.invoke(cli, ["store", "rollback", "b1", *root])
    assert back.exit_code == 0 and store.current_id() == "b1"
    assert runner.invoke(cli, ["store", "verify", *root]).exit_code == 0


def test_store_commands_on_a_non_store_fail_cleanly(tmp_path):
    result = CliRunner().invoke(cli, ["store", "verify", "--store", str(tmp_path / "missing")])
    assert_clean_error(result.output, result.exit_code, 1, "store root does not exist")


def test_bad_config_override_is_reported(tmp_path):
    dump = tmp_path / "kb.tsv"
    dump.write_text("a\tr\tb\n")
    result = CliRunner().invoke(cli, ["build", "--dump", str(dump), "--store", str(tmp_path / "s"),
                                      "--set", "no_equals_sign"])
    assert result.exit_code == 1
    assert "expected key.path=value" in result.output


@pytest.mark.parametrize("command", ["build", "publish", "config"])
def test_an_invalid_config_value_is_one_line_before_any_stage(tmp_path, command, monkeypatch):
    from lokg.pipeline import driver

    monkeypatch.setattr(driver, "run_stage", lambda *a, **k: pytest.fail("a stage started"))
    monkeypatch.setattr(driver, "publish_build", lambda *a, **k: pytest.fail("publish started"))
    dump = tmp_path / "kb.tsv"
    dump.write_text("a\tr\tb\n")
    args = {"build": ["--dump", str(dump), "--store", str(tmp_path / "s")],
            "publish": ["--store", str(tmp_path / "s"), "--build-id", "b1"], "config": []}[command]
    result = CliRunner().invoke(cli, [command, *args, "--set", "ingest.max_malformed_share=abc"])
    assert result.exit_code == 1, result.output
    assert result.output == ("Error: ingest.max_malformed_share: 'abc' has the wrong type "
                             "(expected a number in [0, 1])\n")


def test_config_prints_the_resolved_config(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("publish:\n  keep: 5\n")
    result = CliRunner().invoke(cli, ["config", "--config", str(path), "--set", "gat.epochs=2"])
    assert result.exit_code == 0, result.output
    config = json.loads(result.output)
    assert config["publish"]["keep"] == 5 and config["gat"]["epochs"] == 2


def test_stage_main_refuses_a_bad_config_with_a_usage_error(capsys):
    from lokg.pipeline.stage_launcher import stage_main

    with pytest.raises(SystemExit) as exit_:
        stage_main("ingest", ["--store", "s", "--build-id", "b", "--set", "publish.keep=-1"])
    assert exit_.value.code == 2
    assert "publish.keep: -1 is out of range" in capsys.readouterr().err


def test_runtime_imports_without_heavy_packages():
    code = BLOCK_HEAVY + (
        "import importlib, pkgutil, lokg.runtime as runtime\n"
        "for m in pkgutil.iter_modules(runtime.__path__):\n"
        "    importlib.import_module('lokg.runtime.' + m.name)\n"
        "print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


@pytest.mark.spark
def test_installed_lokg_builds_without_the_env_script(tmp_path):
    """`lokg build` with none of infra/env.sh's variables: Spark's Python workers must run this
    venv's interpreter (a ``\\U`` escape in a literal sends the unescape through a Python UDF,
    which needs pyarrow), and the tokenizer cache is found or seeded by lokg itself."""
    dump = tmp_path / "kg.nt"
    dump.write_text('<http://x/a> <http://x/r> <http://x/b> .\n'
                    '<http://x/a> <http://rdf.freebase.com/ns/type.object.name> '
                    '"A \\U0001F600"@en .\n')
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        [str(Path(sys.executable).parent / "lokg"), "build", "--dump", str(dump),
         "--store", str(tmp_path / "store"), "--build-id", "b1", "--until", "ingest"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    record = json.loads((tmp_path / "store/staging/b1/ingest/_stage.json").read_text())
    names = read_table(Path(record["outputs"]["entities"]), "entities").column("name")
    assert "A \U0001F600" in names.to_pylist()
    seeded = tmp_path / ".cache" / "lokg" / "tiktoken" / BPE_CACHE_KEY
    checkout = REPO / ".cache" / "tiktoken" / BPE_CACHE_KEY
    assert seeded.is_file() or checkout.is_file()


def test_a_current_that_is_a_directory_is_a_one_line_error(tmp_path):
    """Issue 51 D8: CURRENT as a directory made store verify, store list and query raise
    IsADirectoryError tracebacks."""
    from lokg.testing.stores import make_store

    store = make_store(tmp_path)
    (store.root / "CURRENT").unlink()
    (store.root / "CURRENT").mkdir()
    runner = CliRunner()
    for args in (["store", "verify"], ["store", "list"], ["query", "Who directed it?"]):
        result = runner.invoke(cli, [*args, "--store", str(store.root)])
        assert_clean_error(result.output, result.exit_code, 1, str(store.root / "CURRENT"),
                           "cannot be read")
        assert len(result.output.strip().splitlines()) == 1, result.output
