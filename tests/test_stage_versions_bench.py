"""bench/stage_versions.py feeds each stage what the staged build recorded, runs every checkout
under its own interpreter, and compares each checkout's tables with the first one's exactly."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from bench import stage_versions


def _record(staged: Path, stage: str, outputs: dict) -> None:
    (staged / stage).mkdir(parents=True)
    (staged / stage / "_stage.json").write_text(json.dumps({"outputs": outputs}))


def test_a_stage_reads_what_its_producers_recorded(tmp_path):
    _record(tmp_path, "ingest", {"entities": "/x/ent", "relations": "/x/rel", "triples": "/x/tri",
                                 "type_assertions": "/x/ta"})
    _record(tmp_path, "entity_types", {"entities": "/y/ent"})
    assert stage_versions.stage_inputs(tmp_path, None, "entity_types") == {
        "entities": "/x/ent", "relations": "/x/rel", "triples": "/x/tri",
        "type_assertions": "/x/ta"}
    assert stage_versions.stage_inputs(tmp_path, None, "node_gain")["entities"] == "/y/ent"
    assert stage_versions.stage_inputs(tmp_path, Path("/d"), "ingest") == {"dump": "/d"}


def test_a_checkout_without_its_own_venv_is_refused(tmp_path):
    with pytest.raises(SystemExit, match="no .venv/bin/python"):
        stage_versions.checkout_python(tmp_path)


def _fake_checkout(values: dict[str, float]):
    def run_checkout(tree: Path, args, out: Path) -> dict:
        (out / "node_gain").mkdir(parents=True)
        pq.write_table(pa.table({"mu": [values[tree.name]]}), out / "node_gain" / "t.parquet")
        return {"node_gain": {"wall_s": 2.0 if tree.name == "a" else 1.0, "peak_mib": 5.0}}
    return run_checkout


@pytest.mark.parametrize("after_value, equal", [(0.5, True), (0.5 + 2**-52, False)])
def test_tables_are_compared_to_the_last_bit(tmp_path, monkeypatch, after_value, equal):
    monkeypatch.setattr(stage_versions, "run_checkout", _fake_checkout({"a": 0.5, "b": after_value}))
    args = SimpleNamespace(tree=[f"before={tmp_path / 'a'}", f"after={tmp_path / 'b'}"],
                           rounds=2, work=tmp_path / "w", engine="duckdb", stages=("node_gain",),
                           staged=tmp_path, dump=None)
    row = stage_versions.run(args)
    assert row["equality"] == {f"round {i}: after": {"node_gain/t.parquet": equal} for i in (1, 2)}
    assert row["ratio_to_first"] == {"after node_gain": 0.5}
