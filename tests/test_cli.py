"""The lokg command line: help everywhere, store list/verify/rollback, thin imports."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from click.testing import CliRunner

from pipeline.cli import cli
from runtime.contract import Store
from tests.test_contract import _publish

COMMANDS = [[], ["synth"], ["build"], ["demo"], ["config"], ["store"], ["store", "list"],
            ["store", "verify"], ["store", "rollback"], ["store", "show"], ["store", "gc"]]


@pytest.mark.parametrize("args", COMMANDS, ids=lambda a: " ".join(a) or "lokg")
def test_every_command_has_help(args):
    result = CliRunner().invoke(cli, [*args, "--help"])
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
    assert result.exit_code == 1
    assert "store root does not exist" in result.output
    assert "Traceback" not in result.output


def test_bad_config_override_is_reported(tmp_path):
    dump = tmp_path / "kb.tsv"
    dump.write_text("a\tr\tb\n")
    result = CliRunner().invoke(cli, ["build", "--dump", str(dump), "--store", str(tmp_path / "s"),
                                      "--set", "no_equals_sign"])
    assert result.exit_code == 1
    assert "expected key.path=value" in result.output


@pytest.mark.parametrize("command", ["build", "publish", "config"])
def test_an_invalid_config_value_is_one_line_before_any_stage(tmp_path, command, monkeypatch):
    from pipeline import driver

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
    from pipeline.driver import stage_main

    with pytest.raises(SystemExit) as exit_:
        stage_main("ingest", ["--store", "s", "--build-id", "b", "--set", "publish.keep=-1"])
    assert exit_.value.code == 2
    assert "publish.keep: -1 is out of range" in capsys.readouterr().err


#: Prepended to a subprocess's code: importing pyspark, torch or airflow (or what pulls torch)
#: fails, as in a venv that has only the thin runtime.
BLOCK_HEAVY = """
import importlib.abc, sys
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split('.')[0] in {'pyspark', 'torch', 'airflow', 'sentence_transformers'}:
            raise ImportError('blocked ' + name)
sys.meta_path.insert(0, Block())
"""


def test_runtime_imports_without_heavy_packages():
    code = BLOCK_HEAVY + (
        "import importlib, pkgutil, runtime\n"
        "for m in pkgutil.iter_modules(runtime.__path__):\n"
        "    importlib.import_module('runtime.' + m.name)\n"
        "print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"
