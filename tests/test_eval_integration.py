"""``lokg eval`` end to end on a real (small) store: every method, readers none and a scripted
one, reports, determinism, resume, failed calls; and ``--build`` through the real pipeline."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest
from click.testing import CliRunner

from lokg.evaluation.cli import PLOT_FILE, eval_command, run_eval
from lokg.common.metrics import SUMMARY_KEYS, without_latency
from lokg.evaluation.runner import PREDICTIONS
from lokg.runtime import llm as llm_module
from lokg.runtime import taimr
from lokg.pipeline.config import load_config
from lokg.runtime.contract import TABLE_SCHEMAS, Store, write_table
from lokg.runtime.llm import Completion, LLMError

KB = """\
ann_smith\tparents\tbob_smith
ann_smith\tgender\tfemale
ann_smith\tspouse\tcal_jones
bob_smith\tgender\tmale
bob_smith\tnationality\tengland
bob_smith\tchildren\tann_smith
cal_jones\tparents\tdan_jones
cal_jones\tnationality\tfrance
dan_jones\tgender\tmale
dan_jones\tnationality\tfrance
dan_jones\tchildren\tcal_jones
eve_brown\tparents\tbob_smith
eve_brown\tgender\tfemale
"""
TEST = "".join(f"{q}\t{a}({a}/)\t{path}#<end>#{a}\n" for q, a, path in [
    ("what gender is ann_smith 's father ?", "male", "ann_smith#parents#bob_smith#gender#male"),
    ("which nationality is ann_smith 's father ?", "england",
     "ann_smith#parents#bob_smith#nationality#england"),
    ("what is the nationality of cal_jones 's father ?", "france",
     "cal_jones#parents#dan_jones#nationality#france"),
    ("the gender of ann_smith 's spouse 's father ?", "male",
     "ann_smith#spouse#cal_jones#parents#dan_jones#gender#male"),
    ("what gender is zed_unknown 's father ?", "male", "zed_unknown#parents#x#gender#male"),
])


def write_pathquestion(root):
    root.mkdir(parents=True, exist_ok=True)
    (root / "kb.txt").write_text(KB)
    (root / "test.txt").write_text(TEST)
    (root / "train.txt").write_text(TEST.splitlines(keepends=True)[0])
    (root / "dev.txt").write_text(TEST.splitlines(keepends=True)[1])
    return root


def publish_toy_stores(kb_dir, root, build_ids: tuple[str, ...]):
    """The KB as published builds (keys sorted, names with spaces, uniform attention, μ = 1)
    plus the real entity_encode stage's vectors and encoder — no Spark needed. One store root
    per build id, all holding the same build."""
    from lokg.training import entity_encode as encode

    rows = [line.split("\t") for line in (kb_dir / "kb.txt").read_text().splitlines()]
    keys = sorted({x for s, _, o in rows for x in (s, o)})
    rels = sorted({r for _, r, _ in rows})
    eid, rid = {k: i for i, k in enumerate(keys)}, {r: i for i, r in enumerate(rels)}
    staging = root / "src"
    staging.mkdir(parents=True)
    entities = pa.table({
        "id": list(range(len(keys))), "key": keys, "name": [k.replace("_", " ") for k in keys],
        "aliases": [[] for _ in keys], "description": [""] * len(keys),
        "types": [[] for _ in keys], "attributes": [[] for _ in keys]},
        schema=TABLE_SCHEMAS["entities"])
    triples = pa.table({"s": [eid[s] for s, _, _ in rows], "r": [rid[r] for _, r, _ in rows],
                        "o": [eid[o] for _, _, o in rows]}, schema=TABLE_SCHEMAS["triples"])
    tables = {
        "entities": entities, "triples": triples,
        "relations": pa.table({"id": list(range(len(rels))), "name": rels},
                              schema=TABLE_SCHEMAS["relations"]),
        "edges": taimr.uniform_edges(triples),
        "node_gain": pa.table({"id": list(range(len(keys))), "deg_in": [1] * len(keys),
                               "in_relations": [1] * len(keys), "mu": [1.0] * len(keys)},
                              schema=TABLE_SCHEMAS["node_gain"]),
    }
    paths = {}
    for name, table in tables.items():
        paths[name] = staging / f"{name}.parquet"
        write_table(name, table, paths[name])
    enc_dir = staging / "encode"
    enc_dir.mkdir()
    outputs = encode.run(load_config(None, []), {"entities": str(paths["entities"])},
                         str(enc_dir))["outputs"]
    paths["entity_ids"] = outputs["entity_ids"]
    for build_id in build_ids:
        Store(root / build_id).publish(build_id, paths, extra_files={
            "entity_vectors.npy": outputs["entity_vectors"],
            "entity.faiss": outputs["entity_index"], "models/encoder.json": outputs["encoder"]},
            info={"config": {}, "report": {}})
    return [root / build_id for build_id in build_ids]


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    root = tmp_path_factory.mktemp("evaltoy")
    data = write_pathquestion(root / "pq")
    store, no_scos = publish_toy_stores(data, root, ("full", "noscos"))
    return data, store, no_scos


def _run(tmp, toy, out, *extra, methods="all"):
    data, store, no_scos = toy
    return CliRunner().invoke(eval_command, [
        "--dataset", f"pathquestion:{data}", "--store", str(store), "--store-no-scos",
        str(no_scos), "--methods", methods, "--llm", "none", "--out", str(tmp / out),
        "--no-progress", *extra])


def test_every_method_with_reader_none(tmp_path, toy):
    result = _run(tmp_path, toy, "a")
    assert result.exit_code == 0, result.output
    out = tmp_path / "a"
    summary = json.loads((out / "summary.json").read_text())
    assert list(summary) == ["lokg", "lokg-no-scos", "lokg-no-ittc", "lokg-no-taimr",
                             "lokg-no-relknow", "neighbourhood", "kaping", "tog"]
    for method, values in summary.items():
        runtime_method = method not in ("kaping", "tog")  # the runtime's answers: a breakdown
        assert tuple(values) == SUMMARY_KEYS + ("breakdown",) * runtime_method, method
        assert values["n"] == 5 and values["calls/q"] == 0 and values["tok/q"] == 0
        assert values["P@1K"] is None and values["failed_calls"] == 0
        records = [json.loads(x) for x in (out / method / PREDICTIONS).read_text().splitlines()]
        assert [r["id"] for r in records] == [f"test-{i:05d}" for i in range(1, 6)]
        assert records[-1]["status"] == "topic_not_in_store" and records[-1]["predicted"] == []
        if runtime_method:  # no relation knowledge in the toy store; zed_unknown is not in it
            assert records[-1]["breakdown"]["linked"] is False
            assert [r["breakdown"]["first_miss"] for r in records] == ["no_route"] * 4 + [
                "linking"]
            assert values["breakdown"]["linked_wrong"] == {"questions": 1, "lost": 1}
    # TAIMR on a 2-hop question whose answer is reachable: the top candidate is scored
    first = json.loads((out / "lokg" / PREDICTIONS).read_text().splitlines()[0])
    assert first["status"] == "ok" and first["predicted"] and first["tokens"]["knowledge"] > 0
    kaping = json.loads((out / "kaping" / PREDICTIONS).read_text().splitlines()[0])
    assert 0 < len(kaping["triples"]) <= 20 and kaping["details"]["pool"] <= 200
    tog = json.loads((out / "tog" / PREDICTIONS).read_text().splitlines()[0])
    assert len(tog["details"]["depths"]) >= 2 and tog["predicted"]
    assert (out / PLOT_FILE).read_bytes()[:4] == b"\x89PNG"
    md = (out / "summary.md").read_text()
    assert "| `tog` | 5 |" in md and "lokg eval --dataset pathquestion:" in md
    assert "| `lokg` | 5 |" in result.output and "reports in" in result.output

    # the same methods again, elsewhere: the same summary (latency aside)
    some = ["lokg", "kaping", "tog"]
    assert _run(tmp_path, toy, "b", methods=",".join(some)).exit_code == 0
    again = json.loads((tmp_path / "b" / "summary.json").read_text())
    assert without_latency(again) == without_latency({m: summary[m] for m in some})
    # and in the same directory: everything resumes, nothing is appended
    before = (out / "tog" / PREDICTIONS).read_bytes()
    assert _run(tmp_path, toy, "a", methods="tog").exit_code == 0
    assert (out / "tog" / PREDICTIONS).read_bytes() == before
    assert list(json.loads((out / "summary.json").read_text())) == list(summary)
    # other settings in the same directory are refused
    result = _run(tmp_path, toy, "a", "--budget", "64")
    assert result.exit_code != 0 and "budget differ" in result.output


class Scripted:
    """A reader that answers the last line of its prompt's knowledge and fails every 3rd call."""

    name, calls_model, model = "scripted", True, "scripted-1"

    def __init__(self):
        self.n = 0

    def complete(self, prompt, *, max_tokens, system=""):
        self.n += 1
        if self.n % 3 == 0:
            raise LLMError("scripted outage", kind="connect")
        facts = [line for line in prompt.splitlines() if " | " in line]
        text = facts[0].split(" | ")[-1] if facts else "none"
        return Completion(text, 0, 0, 1.0, self.model, 1)


def test_llm_reader_failed_calls_are_counted(tmp_path, toy, monkeypatch):
    data, store, _ = toy
    monkeypatch.setitem(llm_module.BACKENDS, "scripted", Scripted)
    summary = run_eval(dataset=f"pathquestion:{data}", split="test", store=str(store),
                       methods="lokg,kaping,tog", llm="scripted", out=str(tmp_path / "r"),
                       progress=False, log=lambda m: None)
    for method in ("lokg", "kaping", "tog"):
        records = [json.loads(x) for x in
                   (tmp_path / "r" / method / PREDICTIONS).read_text().splitlines()]
        failed = sum(r["failed_calls"] for r in records)
        assert summary[method]["failed_calls"] == failed
        assert summary[method]["failed_questions"] == sum(1 for r in records if r["failed_calls"])
        calls = sum(r["llm_calls"] for r in records)
        assert summary[method]["calls/q"] == pytest.approx(calls / 5, abs=1e-6)
        for r in records:
            if r["failed_calls"]:
                assert "scripted outage" in r["error"]
            if r["llm_calls"]:
                assert r["tokens"]["prompt"] > 0 and r["prompts"]
    assert summary["lokg"]["failed_calls"] >= 1  # one call per answerable question: 4 calls
    assert summary["tog"]["calls/q"] > summary["kaping"]["calls/q"]


def test_missing_store_and_no_scos_store_are_named(tmp_path, toy):
    data, store, _ = toy
    result = CliRunner().invoke(eval_command, [
        "--dataset", f"pathquestion:{data}", "--store", str(tmp_path / "empty"),
        "--out", str(tmp_path / "o"), "--no-progress"])
    assert result.exit_code != 0 and "no published build" in result.output
    assert "--build" in result.output
    result = CliRunner().invoke(eval_command, [
        "--dataset", f"pathquestion:{data}", "--store", str(store), "--methods", "lokg-no-scos",
        "--out", str(tmp_path / "o"), "--no-progress"])
    assert result.exit_code != 0 and "--store-no-scos" in result.output


@pytest.mark.slow
@pytest.mark.spark
def test_build_from_the_dataset_kb(tmp_path):
    data = write_pathquestion(tmp_path / "pq")
    store = tmp_path / "store"
    result = CliRunner().invoke(eval_command, [
        "--dataset", f"pathquestion:{data}", "--store", str(store), "--build",
        "--methods", "lokg,lokg-no-scos", "--out", str(tmp_path / "o"), "--no-progress",
        "--set", "transe.epochs=2", "--set", "gat.epochs=2"])
    assert result.exit_code == 0, result.output
    assert Store(store).current_id() and Store(f"{store}-no-scos").current_id()
    built = Store(f"{store}-no-scos").build()
    assert built.manifest["config"]["scos_merge"]["enabled"] is False
    assert built.manifest["config"]["gat"]["questions"] == str(data / "train.txt")
    summary = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert summary["lokg"]["n"] == 5 and summary["lokg-no-scos"]["n"] == 5


@pytest.mark.slow
@pytest.mark.spark
def test_build_and_breakdown_of_a_metaqa_directory(tmp_path):
    """MetaQA: kb.txt ingested as format metaqa, bracketed topics given (gold) or linked, and
    a breakdown that says "no gold chain" rather than counting chain misses."""
    from lokg.testing.dumps import METAQA_KB, METAQA_TEST

    data = tmp_path / "metaqa"
    data.mkdir()
    (data / "kb.txt").write_text(METAQA_KB)
    (data / "qa_test.txt").write_text(METAQA_TEST)
    summary = run_eval(dataset=f"metaqa:{data}", split="test", store=str(tmp_path / "store"),
                       build=True, policy="route", entities="gold,link", out=str(tmp_path / "o"),
                       overrides=("transe.epochs=2", "gat.epochs=2"), progress=False,
                       log=lambda m: None)
    built = Store(tmp_path / "store").build()
    assert built.manifest["report"]["stages"]["ingest"]["format"] == "metaqa"
    assert list(summary) == ["lokg@gold", "lokg@link"]
    for row, values in summary.items():
        records = [json.loads(x) for x in (tmp_path / "o" / row / PREDICTIONS).read_text()
                   .splitlines()]
        assert [r["topic_entities"] for r in records] == [["Ginger Rogers"], ["Kismet"]]
        assert all(r["breakdown"]["gold_chain"] is None for r in records)
        assert values["breakdown"]["chain_wrong"]["questions"] == 0
        assert values["breakdown"]["derivation_miss"]["questions"] == 0
    gold = [json.loads(x) for x in (tmp_path / "o" / "lokg@gold" / PREDICTIONS).read_text()
            .splitlines()]
    assert all(r["breakdown"]["linked"] for r in gold)  # the bracketed names are store keys


@pytest.mark.parametrize("name, words", [
    ("people.person.place_of_birth", "people person place of birth"),
    ("/film/film/genre", "film film genre"),
    ("parents", "parents"),
])
def test_relation_text(name, words):
    from lokg.evaluation.baselines import relation_text

    assert relation_text(name) == words


def test_one_hop_lists_both_directions_in_graph_order(toy):
    from lokg.evaluation.baselines import one_hop
    from lokg.runtime.query import Runtime

    rt = Runtime.open(toy[1])
    bob = rt.keys.index("bob_smith")
    triples = [(rt.names[s], rt.relation_names[r], rt.names[o]) for s, r, o in one_hop(rt, bob)]
    assert set(triples) == {(s.replace("_", " "), r, o.replace("_", " "))
                            for s, r, o in (line.split("\t") for line in KB.splitlines())
                            if "bob_smith" in (s, o)}
    keys = [(r, s != bob, o if s == bob else s) for s, r, o in one_hop(rt, bob)]
    assert keys == sorted(keys)  # relation, then direction, then neighbour
