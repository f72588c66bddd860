"""bench/run_diff.py: two runs of the same questions, compared question by question."""

from __future__ import annotations

import json

import pytest

from bench.run_diff import compare, main


def record(qid: str, hit: float, predicted: list[str]) -> dict:
    return {"id": qid, "question": f"question {qid}", "gold_path": ["r"], "predicted": predicted,
            "scores": {"H@1": hit}}


BEFORE = [record("a", 1.0, ["x"]), record("b", 0.0, ["y"]), record("c", 0.0, ["z"]),
          record("d", 1.0, ["w"])]
AFTER = [record("a", 0.0, ["v"]), record("b", 1.0, ["u"]), record("c", 0.0, ["t"]),
         record("d", 1.0, ["w"]), record("e", 1.0, ["s"])]  # e: asked only after, not compared


def test_compare_counts_the_questions_that_turned_and_the_changed_answers():
    diff = compare({r["id"]: r for r in BEFORE}, {r["id"]: r for r in AFTER}, "H@1")
    assert diff == {"n": 4, "before": 0.5, "after": 0.5, "right": ["b"], "wrong": ["a"],
                    "changed": 3}


def write_run(root, rows) -> None:
    (root / "lokg").mkdir(parents=True)
    (root / "lokg" / "predictions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_a_pair_of_run_directories_is_printed_with_the_questions_that_turned(tmp_path, capsys):
    write_run(tmp_path / "before", BEFORE)
    write_run(tmp_path / "after", AFTER)
    main([str(tmp_path / "before"), str(tmp_path / "after")])
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "after: n 4 H@1 0.500 -> 0.500, +1 / -1, 3 answers changed"
    assert out[1:] == ["    + question b  ['r']", "    - question a  ['r']"]


def test_runs_come_in_pairs(tmp_path):
    with pytest.raises(SystemExit):
        main([str(tmp_path)])
