"""Where answers were lost: the per-question breakdown, its summary rows (two partitions of the
questions), the gold chain in the store's relation names, and ``lokg eval`` with both entity
modes on the relation-knowledge toy store of lokg.testing.family."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest

from lokg.evaluation.breakdown import (
    CHAIN_MISSES,
    MISS_ROWS,
    PATHS,
    answer_path,
    chain_miss,
    map_hop,
    question_breakdown,
    summarise_breakdown,
)
from lokg.evaluation.context import EvalContext, MethodError, entity_modes
from lokg.evaluation.report import breakdown_table
from lokg.common.datasets import Question
from lokg.evaluation.methods import run_names
from lokg.evaluation.runner import PREDICTIONS
from lokg.runtime.contract import TABLE_SCHEMAS, Store, write_table
from lokg.runtime.query import Runtime
from lokg.runtime.relknow import PREDICTORS
from lokg.testing.family import family_triples, fitted_store

Q = Question("q-1", "what is the job of edda quist 's wife ?", ("pilot",), ("e4",),
             ("spouse", "profession"))
LINKED = [{"id": 4, "key": "e4", "name": "edda quist"}]


def route(chain, derived, passed=True, gate="route", predictor="knn"):
    """An Answer.route as the runtime leaves it (the fields the breakdown reads)."""
    return {"source": "derived" if passed else "retrieval", "chain": chain, "derived": derived,
            "gate": {"name": gate, "passed": passed}, "predictor": predictor}


def test_map_hop_maps_the_relation_and_keeps_the_inverse_mark():
    canonical = {"film.film.directed_by": "film.film.director", "spouse": "spouse"}
    assert map_hop("film.film.directed_by", canonical) == "film.film.director"
    assert map_hop("~film.film.directed_by", canonical) == "~film.film.director"
    assert map_hop("~unknown", canonical) == "~unknown"  # not in the map: as written


@pytest.mark.parametrize("gold, linked, r, expected", [
    (["spouse", "profession"], LINKED, route(["spouse", "profession"], ["pilot"]),
     {"chain_right": True, "derived_right": True, "gate_passed": True, "first_miss": None}),
    (["spouse", "profession"], LINKED, route(["parents", "profession"], ["baker"]),
     {"chain_right": False, "derived_right": False, "first_miss": "chain",
      "chain_miss": "first_hop"}),
    (["spouse", "profession"], LINKED, route(["spouse", "profession"], ["baker", "pilot"], False),
     {"chain_right": True, "derived_hit": True, "derived_right": False, "gate_passed": False,
      "first_miss": "derivation"}),
    (["spouse", "profession"], [], route(["spouse", "profession"], []),
     {"linked": False, "derived_right": False, "first_miss": "linking"}),
    (None, LINKED, route(["spouse", "profession"], ["baker"]),  # MetaQA: no gold path
     {"chain_right": None, "first_miss": "no_gold_chain"}),
    (["spouse", "profession"], LINKED, None,
     {"chain": None, "chain_right": None, "derived_right": None, "first_miss": "no_route"}),
    (["spouse", "profession"], LINKED, {"source": None, "reason": "no relation knowledge"},
     {"derived_right": None, "gate_passed": None, "first_miss": "no_route"}),
    (["~children", "profession"], LINKED, route(["~children", "profession"], ["pilot"]),
     {"chain_right": True, "first_miss": None}),  # inverse hops compared by name
    (["spouse", "profession"], LINKED, route(["spouse", "profession"], ["pilot"], False, "lokg"),
     {"gate_passed": None}),  # policy lokg consults no gate
])
def test_question_breakdown(gold, linked, r, expected):
    b = question_breakdown(Q, gold, linked, r, "derived")
    assert {k: b[k] for k in expected} == expected


@pytest.mark.parametrize("chain, gold, expected", [
    (None, ["a", "b"], "no_chain"),
    (["a"], ["a", "b"], "hop_left_out"),
    (["b"], ["a", "b"], "hop_left_out"),  # the first hop left out
    (["c"], ["a", "b"], "shorter"),
    (["a", "b", "c"], ["a", "b"], "hop_added"),
    (["c", "a", "b"], ["a", "b"], "hop_added"),
    (["a", "c", "d"], ["a", "b"], "longer"),
    (["b", "a"], ["a", "b"], "first_hop"),  # the hops of the gold chain in another order
    (["a", "c", "b"], ["a", "b", "b"], "later_hop"),
    (["a", "~b"], ["a", "b"], "later_hop"),  # an inverse hop is another hop
])
def test_chain_miss_says_how_the_chain_differs(chain, gold, expected):
    assert chain_miss(chain, gold) == expected


def test_chain_miss_is_null_unless_the_chain_is_wrong():
    right = question_breakdown(Q, ["spouse", "profession"], LINKED,
                               route(["spouse", "profession"], ["pilot"]), "derived")
    no_gold = question_breakdown(Q, None, LINKED, route(["spouse"], ["pilot"]), "derived")
    assert right["chain_miss"] is None and no_gold["chain_miss"] is None


def test_answer_path_prefers_the_route_then_the_answer():
    assert answer_path({"source": "llm"}, "ok", ["x"], 1, False) == "llm"
    assert answer_path(None, "ok", ["x"], 1, False) == "llm"
    assert answer_path(None, "fallback", ["x"], 1, True) == "retrieval"  # the call failed
    assert answer_path(None, "ok", ["x"], 0, False) == "retrieval"
    assert answer_path({"source": None}, "no_paths", [], 0, False) == "none"
    assert answer_path(None, "abstained", [], 0, False) == "abstain"


@pytest.fixture(scope="module")
def family_store(tmp_path_factory):
    """lokg.testing.family's family graph with its fitted relation knowledge (no encoder:
    the lexicon predicts the chains)."""
    return fitted_store(tmp_path_factory.mktemp("family"), family_triples())


def record(predicted, gold_chain, r, path):
    return {"predicted": predicted, "gold": list(Q.answers),
            "breakdown": question_breakdown(Q, gold_chain, LINKED, r, path)}


def test_summary_rows_partition_the_questions_and_the_losses():
    chain = ["spouse", "profession"]
    records = [
        record(["pilot"], chain, route(chain, ["pilot"]), "derived"),  # right
        record(["baker"], chain, route(["parents", "profession"], ["baker"]), "derived"),
        record(["baker"], chain, route(chain, ["pilot"], False), "retrieval"),  # gate said no
        record(["pilot"], chain, route(chain, ["pilot"], False), "retrieval"),  # fallback right
        record(["weaver"], chain, route(chain, ["weaver"], False), "retrieval"),
    ]
    s = summarise_breakdown(records)
    assert s["all"] == {"questions": 5, "lost": 3}
    assert s["chain_wrong"] == {"questions": 1, "lost": 1}
    assert s["chain_first_hop"] == {"questions": 1, "lost": 1}  # (parents, …) for (spouse, …)
    assert sum(s[f"chain_{m}"]["questions"] for m, _ in CHAIN_MISSES) == 1
    assert s["derivation_miss"] == {"questions": 1, "lost": 1}
    assert s["derivation_right"] == {"questions": 3, "lost": 1}
    assert s["gate_passed"] == {"questions": 2, "lost": 1}  # coverage 2/5, precision 1/2
    assert s["gate_passed_wrong"] == {"questions": 1, "lost": 1}
    assert s["gate_rejected_right"] == {"questions": 2, "lost": 1}
    assert s["path_derived"] == {"questions": 2, "lost": 1}
    assert s["path_retrieval"] == {"questions": 3, "lost": 2}
    for block in ([k for k, _, _ in MISS_ROWS], [f"path_{p}" for p in PATHS]):
        assert sum(s[k]["questions"] for k in block) == 5
        assert sum(s[k]["lost"] for k in block) == 3
    assert summarise_breakdown([*records, {"predicted": [], "gold": ["x"]}]) is None


def test_predictor_rows_split_the_routed_questions_by_what_predicted_their_chain():
    """What a rule gained or lost shows as its row: the questions its chain answered and how
    many of them were lost; the table leaves out predictors no question used."""
    chain = ["spouse", "profession"]
    records = [
        record(["pilot"], chain, route(chain, ["pilot"]), "derived"),
        record(["baker"], chain, route(["parents", "profession"], ["baker"]), "derived"),
        record(["weaver"], chain, route(chain, ["weaver"], predictor="runs_decoded"), "derived"),
        record(["baker"], chain, None, "retrieval"),  # no relation knowledge consulted
    ]
    s = summarise_breakdown(records)
    assert s["predictor_knn"] == {"questions": 2, "lost": 1}
    assert s["predictor_runs_decoded"] == {"questions": 1, "lost": 1}
    assert sum(s[f"predictor_{p}"]["questions"] for p in PREDICTORS) == 3  # those with a route
    table = breakdown_table({"lokg": {"breakdown": s}})
    assert "| chain by: runs_decoded | 1 (1) |" in table and "chain by: lexicon" not in table


def test_entity_modes_and_row_names():
    assert entity_modes("gold") == ["gold"] and entity_modes("gold, link") == ["gold", "link"]
    with pytest.raises(MethodError, match="--entities 'text'"):
        entity_modes("text")
    assert run_names(["lokg", "kaping"], ["link"]) == {"lokg": ("lokg", "link"),
                                                      "kaping": ("kaping", "link")}
    assert list(run_names(["lokg", "kaping"], ["gold", "link"])) == [
        "lokg@gold", "lokg@link", "kaping@gold", "kaping@link"]


def test_gold_chain_goes_through_the_stores_relation_map(tmp_path):
    """A store whose SCOS merged ``directed_by`` into ``director``: the gold path is compared
    in the canonical names, an inverse hop keeps its mark."""
    tables = {
        "entities": pa.table({"id": [0, 1], "key": ["f", "d"], "name": ["f", "d"],
                              "aliases": [[], []], "description": ["", ""],
                              "types": [[], []], "attributes": [[], []]},
                             schema=TABLE_SCHEMAS["entities"]),
        "relations": pa.table({"id": [0], "name": ["director"]}, schema=TABLE_SCHEMAS["relations"]),
        "relation_map": pa.table({"id": [0, 1], "name": ["director", "directed_by"],
                                  "canonical_id": [0, 0], "canonical_name": ["director"] * 2},
                                 schema=TABLE_SCHEMAS["relation_map"]),
        "triples": pa.table({"s": [0], "r": [0], "o": [1]}, schema=TABLE_SCHEMAS["triples"]),
    }
    paths = {}
    for name, table in tables.items():
        paths[name] = tmp_path / f"{name}.parquet"
        write_table(name, table, paths[name])
    Store(tmp_path / "store").publish("scos", paths, info={"config": {}, "report": {}})
    rt = Runtime.open(tmp_path / "store")
    ctx = EvalContext(rt, llm=None)
    q = Question("q", "who directed f ?", ("d",), ("f",), ("directed_by", "~directed_by"))
    assert ctx.gold_chain(rt, q) == ["director", "~director"]
    assert ctx.gold_chain(rt, Question("m", "who directed f ?", ("d",), ("f",))) is None


def test_eval_with_both_entity_modes_on_a_store_with_relation_knowledge(family_store, tmp_path):
    from lokg.evaluation.cli import LOSS_PLOT_FILE, run_eval

    store, _ = family_store
    dev = (Path(store).parent / "dev.jsonl").read_text().splitlines()
    unnamed = {"question": "what is the job of the wife ?", "answers": ["pilot"],  # of e4
               "topic_entities": ["e4"], "path": ["spouse", "profession"]}
    questions = tmp_path / "questions.jsonl"
    questions.write_text("\n".join([*dev, json.dumps(unnamed)]) + "\n")
    out = tmp_path / "run"
    summary = run_eval(dataset=f"jsonl:{questions}", split=None,
                       store=str(store), methods="lokg,lokg-no-relknow", policy="route",
                       entities="gold,link", out=str(out), progress=False, log=lambda m: None)
    assert list(summary) == ["lokg@gold", "lokg@link", "lokg-no-relknow@gold",
                             "lokg-no-relknow@link"]
    plain = summary["lokg-no-relknow@gold"]["breakdown"]  # relation knowledge left unused
    assert plain["no_relation_knowledge"]["questions"] == summary["lokg-no-relknow@gold"]["n"]
    for row in ("lokg@gold", "lokg@link"):
        records = [json.loads(x) for x in (out / row / PREDICTIONS).read_text().splitlines()]
        s = summary[row]["breakdown"]
        assert s["all"]["questions"] == len(records) == summary[row]["n"]
        assert s["all"]["lost"] == sum(r["scores"]["H@1"] == 0 for r in records)
        for r in records:
            b = r["breakdown"]
            assert b["gold_chain"] == r["gold_path"]  # the toy store merges nothing
            unlinked = r["status"] == "no_entity"  # nothing to predict a chain from
            assert b["chain_right"] == (None if unlinked else b["chain"] == r["gold_path"])
            if b["path"] == "derived":  # the derived answer is the answer
                assert b["gate_passed"] and b["derived_right"] == (r["scores"]["H@1"] == 1.0)
            if row == "lokg@gold":
                assert b["linked"] is True
        assert s["derivation_right"]["questions"] > 0 and s["path_derived"]["questions"] > 0
    # the question that does not name its topic: given in gold mode, unlinkable in link mode
    assert summary["lokg@gold"]["breakdown"]["linked_wrong"] == {"questions": 0, "lost": 0}
    assert summary["lokg@link"]["breakdown"]["linked_wrong"] == {"questions": 1, "lost": 1}
    assert summary["lokg@link"]["breakdown"]["path_none"] == {"questions": 1, "lost": 1}
    md = (out / "summary.md").read_text()
    assert "| chain wrong (linked right) |" in md and "`lokg@link`" in md
    assert (out / LOSS_PLOT_FILE).read_bytes()[:4] == b"\x89PNG"
    assert json.loads((out / "run.json").read_text())["settings"]["entities"] == "gold,link"
