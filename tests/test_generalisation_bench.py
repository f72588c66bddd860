"""bench/generalisation.py: a row's figures, the precision gate's and linking's beside the
route's."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from bench.generalisation import figures, markdown


def line(h1: float, source: str | None = None, passed: bool | None = None,
         linked: bool = True, links: int = 1) -> dict:
    """A predictions.jsonl line of method lokg as figures reads it."""
    miss = None if h1 and source == "derived" else "chain" if linked else "linking"
    return {"scores": {"H@1": h1}, "topic_entities": ["m.1"],
            "details": {"route": {"source": source}, "linked": [{"key": "m.1"}] * links},
            "breakdown": {"gate_passed": passed, "linked": linked, "first_miss": miss}}


def test_figures_give_the_precision_gates_coverage_and_precision_from_the_second_run():
    routed = [line(1.0, "derived"), line(0.0, "derived"), line(1.0, "retrieval"), line(0.0)]
    gated = [line(1.0, "derived", True), line(0.0, "derived", True), line(0.0, "abstain", False),
             line(0.0, "abstain", False)]
    f = figures(routed, gated)
    assert f["n"] == 4 and f["H@1"] == 0.5
    assert f["derived"] == 0.5 and f["derived_H@1"] == 0.5
    assert f["gate"] == 0.5 and f["gate_H@1"] == pytest.approx(0.5)
    assert "gate" not in figures(routed)  # baselines have no gated run
    assert figures(routed, [line(0.0, "abstain", False)])["gate_H@1"] is None
    baseline = [{k: v for k, v in r.items() if k != "breakdown"} for r in routed]
    table = markdown([{"setting": "s", "graph": "g", "trained": "t", "asked": "a",
                       "entities": "gold", "method": "kaping", **figures(baseline)}], "cmd")
    assert table.splitlines()[-1].endswith("| 0.500 | 0.500 | — | — | — | — | — |")


def test_figures_say_what_linking_loses():
    """Questions linked wrong, and those of them lost (a linking miss that retrieval still
    answered right is linked wrong but not lost)."""
    routed = [line(1.0, "derived"), line(0.0, "derived", linked=False),
              line(1.0, "retrieval", linked=False), line(0.0, "retrieval", links=2)]
    f = figures(routed)
    assert f["linked_wrong"] == 0.5 and f["lost_linking"] == 0.25
    assert f["linked_more"] == "0.250 (1)"  # linked right, with a second entity: lost
    assert "linked_wrong" not in figures([{k: v for k, v in r.items() if k != "breakdown"}
                                          for r in routed])  # baselines have no breakdown


def test_set_adds_build_overrides_to_every_store(tmp_path, monkeypatch):
    """``--set entity_encode.model=DIR`` reaches both runs' builds after the step's own."""
    import lokg.evaluation.cli

    from bench import generalisation

    seen = []

    def run_eval(**options):
        seen.append(options["overrides"])
        out = Path(options["out"]) / options["methods"]
        out.mkdir(parents=True)
        (out / "predictions.jsonl").write_text("")

    monkeypatch.setattr(lokg.evaluation.cli, "run_eval", run_eval)
    args = argparse.Namespace(set=["entity_encode.model=/m"], limit=None, no_progress=True)
    generalisation.evaluate(args, dataset="synth:q.jsonl", store=tmp_path / "store",
                            out=tmp_path / "run", overrides=["gat.questions=t.jsonl"])
    assert seen == [["gat.questions=t.jsonl", "entity_encode.model=/m"]] * 2


def test_zero_shot_rows_say_whether_the_knowledge_holds_a_gold_answer_and_what_it_costs():
    """gold in knowledge: a gold answer (normalised) is an endpoint of an injected triple."""
    from bench.generalisation import hop_rows, knowledge_figures

    def record(qid, gold, triples, tokens, h1=0.0, source=None):
        return {"id": qid, "gold": gold, "scores": {"H@1": h1}, "tokens": {"knowledge": tokens},
                "triples": [{"s": s, "r": "r", "o": o} for s, o in triples],
                "details": {"route": {"source": source}}}

    records = [record("q1", ["The Dark River"], [("dark river", "Ann")], 10, 1.0, "derived"),
               record("q2", ["Bob"], [("Bobby", "Ann")], 20),
               record("q3", ["Ann"], [], 0)]
    assert knowledge_figures(records) == {"gold_in_knowledge": pytest.approx(1 / 3),
                                          "knowledge_tok": 10.0}
    questions = {"q1": {"hops": 1, "inverse": False}, "q2": {"hops": 2, "inverse": True},
                 "q3": {"hops": 2, "inverse": False}}
    rows = [{**r, "entities": "gold"} for r in hop_rows("kaping", records, None, questions,
                                                        "wild")]
    assert [(r["n"], r["gold_in_knowledge"], r["derived_H@1"]) for r in rows] == [
        (1, 1.0, 1.0), (2, 0.0, None), (3, pytest.approx(1 / 3), 1.0)]
    assert rows[0]["graph"] == "synth plain, metaqa, wild wording"
    table = markdown(rows, "cmd").splitlines()
    assert table[-1] == ("| kaping | gold | wild | test, all hop counts | 3 | 0.333 | 0.333 "
                         "| 1.000 | 0.333 | 10.000 |")
