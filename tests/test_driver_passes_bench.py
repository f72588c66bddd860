"""bench/driver_passes.py compares every checkout's tables with the first one's, in every round
(the order of the checkouts alternates), and stops when they differ."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from bench import driver_passes


def _fake_checkout(values: dict[str, int]):
    def run_checkout(tree: Path, ingest: Path, out: Path) -> dict:
        (out / "entity_types").mkdir(parents=True)
        pq.write_table(pa.table({"v": [values[tree.name]]}), out / "entity_types" / "t.parquet")
        return {stage: {"wall_s": 1.0} for stage in driver_passes.STAGES}
    return run_checkout


@pytest.mark.parametrize("after_value, equal", [(1, True), (2, False)])
def test_each_round_compares_after_both_checkouts_ran(tmp_path, monkeypatch, after_value, equal):
    monkeypatch.setattr(driver_passes, "run_checkout", _fake_checkout({"a": 1, "b": after_value}))
    args = SimpleNamespace(tree=[f"before={tmp_path / 'a'}", f"after={tmp_path / 'b'}"],
                           rounds=2, work=tmp_path / "w", ingest=tmp_path)
    if not equal:
        with pytest.raises(SystemExit, match="differ"):
            driver_passes.run(args)
        return
    row = driver_passes.run(args)
    assert set(row["equality"]) == {"round 1: after", "round 2: after"}
    assert all(all(found.values()) and found for found in row["equality"].values())
