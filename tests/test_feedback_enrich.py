"""Stage ``feedback_enrich``: sub-questions from the feedback log, closing what
earlier deltas answered, de-duplication by edit distance, stores without chunks, malformed log
segments; and (slow) the whole loop through the driver: a synthetic question a build cannot
answer, its feedback, and the refresh that answers it with the triple's lineage.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from lokg.pipeline.config import load_config
from lokg.runtime.feedback import FeedbackLog, log_dir, read_log
from lokg.text import feedback_answers as fa
from lokg.text import feedback_deltas as fd
from lokg.testing.builds import REFRESH_FAST as FAST
from lokg.testing.builds import answers, withheld_question
from lokg.text import feedback_enrich as fe
from lokg.text import feedback_published as fp
from lokg.text import feedback_questions as fq
from lokg.text.triple_extract import entity_key


def _log(store: Path, *records: dict) -> None:
    log = FeedbackLog(log_dir(store))
    for record in records:
        assert log.append(record)
    log.close()


def _missing(entity: str, relation: str, name: str = "Febaville") -> dict:
    return {"build_id": "b0", "kind": "chain_stop", "mentions": [],
            "missing": [{"entity": entity, "name": name, "relation": relation,
                         "text": f"{name} {relation}"}]}


def test_edit_distance_threshold_decides_duplicates():
    graph = ["febaville · country · febaland"]
    near = "febaville · country · febalands"  # one insertion in 31 characters: 0.032
    assert fp.edit_distance(near, graph[0]) == pytest.approx(1 / 31)
    assert fp.near_duplicate(near, graph, 0.1) == 0
    assert fp.near_duplicate(near, graph, 0.02) is None
    assert fp.near_duplicate("febaville · capital · lorvin", graph, 0.1) is None


def test_near_duplicates_of_the_graph_are_dropped_and_of_each_other_merged():
    class Pub:
        @staticmethod
        def graph_texts(keys):
            return {"oslo": [fp.triple_text("Oslo", "capital of", "Norway")]}

    def cand(feedback_id, head, relation, tail):
        sq = fq.SubQuestion("", head, "", head, [feedback_id])
        return fa.Candidate(sq, {"chunk_id": "c1"}, (head, relation, tail),
                            (entity_key(head), head), (entity_key(tail), tail), relation)

    delta = fa.deduplicated([cand("a", "Oslo", "capital of", "Norway"),  # the graph's
                             cand("b", "Oslo", "twinned with", "Gothenburg"),
                             cand("c", "Oslo", "twinned with", "Gothenburg."),  # near b's
                             cand("d", "Oslo", "twinned with", "Gothenburg"),  # b's again
                             cand("e", "Bergen", "twinned with", "Gothenburg")], Pub(), 0.1)
    assert [(r["s_name"], r["o_name"], r["feedback_ids"]) for r in delta.rows] == [
        ("Oslo", "Gothenburg", ["b", "c", "d"]), ("Bergen", "Gothenburg", ["e"])]
    assert delta.duplicates == 3 and sorted(delta.answered) == sorted(
        fq.SubQuestion("", n, "", n).key for n in ("Oslo", "Bergen"))


def test_sub_questions_merge_records_asking_the_same_fact():
    records = [{"id": "a", **_missing("m.1", "location.city.country")},
               {"id": "b", **_missing("m.1", "location.city.country")},
               {"id": "c", **_missing("m.1", "~location.country.capital")},
               {"id": "d", "build_id": "b0", "kind": "no_entity", "missing": [],
                "mentions": ["Lorvin Bay"]},
               {"id": "e", **_missing("m.1", "location.city.country"), "mentions": ["Febastan"]}]
    sqs = fq.sub_questions(records)
    assert [(sq.entity, sq.relation, sq.feedback_ids) for sq in sqs] == [
        ("m.1", "location.city.country", ["a", "b", "e"]),
        ("m.1", "~location.country.capital", ["c"]),
        ("", "", ["d"]), ("", "", ["e"])]  # a stopped chain's topic is asked about too
    assert [sqs[2].name, sqs[3].name] == ["Lorvin Bay", "Febastan"]


def _asked(sq: fq.SubQuestion, time: str, build_id: str) -> fq.SubQuestion:
    sq.asked.append((time, build_id))
    return sq


CFG = {"k": 3, "max_passages": 6, "max_sub_questions": 10}


def test_answered_sub_questions_close_and_fruitless_ones_wait_for_new_passages(tmp_path):
    answered, nothing = fq.SubQuestion("m.1", "A", "r", "", ["f1"]), \
        fq.SubQuestion("m.2", "B", "r", "", ["f2"])
    delta = fd.Delta(rows=[], answered={answered.key: ["f1"]})
    fd.persist(tmp_path, "d1", delta, [answered, nothing], {"fingerprint": "fp1"}, 3)
    state = fd.earlier(tmp_path, own_id="d2")
    fresh = fq.SubQuestion("m.3", "C", "r", "", ["f3"])
    assert fe._open([answered, nothing, fresh], state, "fp1", CFG) == \
        ([fresh], {"closed_answered": 1, "closed_tried": 1, "reopened": 0})
    assert fe._open([answered, nothing, fresh], state, "fp2", CFG)[0] == [nothing, fresh]
    # a retried refresh (same delta id) does not close what its own first attempt answered
    assert fd.earlier(tmp_path, own_id="d1") == {}


def test_a_sub_question_asked_again_after_its_delta_reopens_at_the_next_passages(tmp_path):
    """The question still lacks something with the delta built in: the same k passages would
    give the same triples, so the next k are tried, down to max_passages — the old code closed
    it forever after one try."""
    sq = _asked(fq.SubQuestion("m.1", "A", "r", "", ["f1"]), "2026-01-01T00:00:00.000Z", "b0")
    fd.persist(tmp_path, "b0", fd.Delta(answered={sq.key: ["f1"]}), [sq],
               {"fingerprint": "fp", "from_build": "b0"}, 3)
    assert fe._open([sq], fd.earlier(tmp_path, None), "fp", CFG)[0] == []  # not asked again
    same_build = _asked(sq, "2999-01-01T00:00:00.000Z", "b0")  # the old build, not the delta's
    assert fe._open([same_build], fd.earlier(tmp_path, None), "fp", CFG)[0] == []
    later = _asked(sq, "2999-01-01T00:00:00.000Z", "b1")
    todo, counts = fe._open([later], fd.earlier(tmp_path, None), "fp", CFG)
    assert todo == [later] and later.skip == 3 and counts["reopened"] == 1
    fd.persist(tmp_path, "b1", fd.Delta(), todo, {"fingerprint": "fp", "from_build": "b1"}, 3)
    assert json.loads((tmp_path / "b1.json").read_text())["depth"] == {sq.key: 6}
    deepest = _asked(sq, "2999-01-02T00:00:00.000Z", "b2")
    assert fe._open([deepest], fd.earlier(tmp_path, None), "fp", CFG)[0] == []  # max_passages


def test_reopened_sub_question_retrieves_the_passages_after_those_it_tried():
    class Pub:  # the chunk index: vectors of 5 chunks at falling cosine to any query
        vectors = np.array([[1.0, 0.0], [0.9, 0.1], [0.8, 0.2], [0.7, 0.3], [0.6, 0.4]])

        class encoder:
            @staticmethod
            def encode_queries(texts):
                return np.array([[1.0, 0.0]] * len(texts))

    assert fp.Published.nearest(Pub, ["a", "b"], 2, [0, 2]) == [[0, 1], [2, 3]]


def test_bridges_and_kept_questions_become_their_own_sub_questions():
    record = {"id": "a", "time": "t", "build_id": "b0", "kind": "no_derivation", "missing": [],
              "mentions": ["Decade"], "bridges": [{"name": "Neil Young", "text": "Neil Young"}]}
    sqs = fq.sub_questions([record])
    assert [(sq.entity, sq.name, sq.text) for sq in sqs] == [
        ("", "Decade", "Decade"), ("", "Neil Young", "Neil Young")]
    kept = fq.sub_questions([{**record, "question": "Who is the sibling of the performer of Decade?"}])
    assert kept[0].text == "Who is the sibling of the performer of Decade?"
    assert kept[0].key != sqs[0].key  # retrieved by other words: not closed by the name's delta
    assert kept[1].key == sqs[1].key and sqs[0].asked == [("t", "b0")]


def test_a_gold_off_every_linked_path_is_joined_from_the_questions_passages():
    """The Meehan Bonnar question links only Meehan Bonnar and reaches his birthplace; the
    diocese's passage — nearest the question's words, about no name the question reached —
    states the gold. Asked of the record's passages: the mention's own triples, the unlinked
    name's, and a bridge from the linked name to the passage's topic that cites its sentence."""
    chunks = [{"chunk_id": "c0", "doc_id": "d0"}, {"chunk_id": "c1", "doc_id": "d1"}]
    passage = {"d0": [("Meehan Bonnar", "born in", "Fredericton")],
               "d1": [("Diocese of Fredericton", "part of", "Anglican Church of Canada"),
                      ("Diocese of Fredericton", "established in", "1845")]}
    names = ["Meehan Bonnar", "Fredericton", "Diocese of Fredericton", "Anglican Church of Canada"]

    class Pub:
        keys = [entity_key(n) for n in names]
        id_of = {k: i for i, k in enumerate(keys)}
        by_form = {k: k for k in keys}
        forms_of: dict = {}
        row_of = {"c0": 0, "c1": 1}
        sentences = {"c0": [("s0", "Meehan Bonnar was born in Fredericton.")],
                     "c1": [("s1", "The Diocese of Fredericton is a diocese of the Anglican "
                                   "Church of Canada.")]}
        end = fp.Published.end

        @staticmethod
        def nearest(texts, k, skips):  # by name: only the birthplace's passage
            return [[0] for _ in texts]

    Pub.names, Pub.chunks = names, chunks

    class Extraction:
        @staticmethod
        def triples(chunk):
            return passage[chunk["doc_id"]]

    record = {"id": "a", "time": "t", "build_id": "b0", "kind": "no_derivation", "missing": [],
              "mentions": ["Meehan Bonnar"], "unlinked": ["Diocese"], "passages": ["c1", "gone"]}
    sqs = fq.sub_questions([record])
    asked = [(sq.name, sq.relation, sq.passages) for sq in sqs]
    assert asked == [("Meehan Bonnar", "", ()), ("Meehan Bonnar", "", ("c1", "gone")),
                     ("Diocese", "", ("c1", "gone")),
                     ("Meehan Bonnar", fe.BRIDGE, ("c1", "gone"))]
    assert len({sq.key for sq in sqs}) == 4  # each its own: closed by its own delta
    by_name = fa.retrieved(sqs[:1], Pub(), Extraction, 3, range(1))
    assert [c.triple for c in by_name] == [passage["d0"][0]]  # retrieval by the name: no gold
    found = fa.retrieved(sqs[1:], Pub(), Extraction, 3, range(1))  # 'Diocese': another name
    assert [(c.s[1], c.triple[1], c.o[1]) for c in found] == [
        ("Diocese of Fredericton", "part of", "Anglican Church of Canada"),
        ("Diocese of Fredericton", "established in", "1845"),
        ("Meehan Bonnar", fe.BRIDGE, "Diocese of Fredericton")]  # the path to them
    assert [c.relation for c in found] == ["", "", fe.BRIDGE]  # the passage's: graph-nearest
    row = fa._row(found[-1])  # the bridge cites the sentence that names the topic
    assert (row["chunk_id"], row["sentence_id"]) == ("c1", "s1")
    assert "Anglican Church of Canada" in row["sentence"]
    # a passage about the linked name itself needs no bridge, only its triples
    own = fq.SubQuestion("", "Diocese of Fredericton", fe.BRIDGE, "x", passages=("c1",))
    assert [c.relation for c in fa.retrieved([own], Pub(), Extraction, 3, range(1))] == ["", ""]
    # nor one at a rank without a bridge (among the runtime's own seeds, or past the cap)
    assert [c.relation for c in fa.retrieved(sqs[-1:], Pub(), Extraction, 3, range(1, 5))] \
        == ["", ""]


def test_a_bridge_starts_at_the_most_specific_linked_name_and_only_past_the_seeds():
    """The record links the generic "Diocese" first: the bridge starts at "Meehan Bonnar"
    (more words). Of the question's passages, nearest first, those the runtime already seeds
    a context with (``query.passages``) and those past ``bridge_passages`` more give their
    triples but no bridge — every bridge is an edge of the name competing for its paths."""
    record = {"id": "a", "time": "t", "build_id": "b0", "kind": "no_derivation", "missing": [],
              "mentions": ["Diocese", "Meehan Bonnar"], "passages": ["c0", "c1", "c2", "c3"]}
    bridge = [sq for sq in fq.sub_questions([record]) if sq.relation == fe.BRIDGE]
    assert [(sq.name, sq.passages) for sq in bridge] == [("Meehan Bonnar", ("c0", "c1", "c2", "c3"))]
    topics = {"c0": "Alpha Town", "c1": "Beta Lake", "c2": "Gamma Hill", "c3": "Delta Bay"}

    class Pub:
        chunks = [{"chunk_id": c} for c in topics]
        row_of = {c: i for i, c in enumerate(topics)}
        sentences = {c: [(f"s{c}", f"{t} is a place.")] for c, t in topics.items()}

        @staticmethod
        def end(_, name):
            return entity_key(name), name

    class Extraction:
        @staticmethod
        def triples(chunk):
            return [(topics[chunk["chunk_id"]], "is in", "Somewhere")]

    config = {"query": {"passages": 1}}
    ranks = fe.bridge_ranks(config, {"bridge_passages": 2})
    found = fa.retrieved(bridge, Pub(), Extraction, 3, ranks)
    assert len([c for c in found if c.relation != fe.BRIDGE]) == 4  # every passage's triples
    assert [c.triple for c in found if c.relation == fe.BRIDGE] == [
        ("Meehan Bonnar", fe.BRIDGE, "Beta Lake"), ("Meehan Bonnar", fe.BRIDGE, "Gamma Hill")]


def test_consolidated_delta_keeps_provenance_per_feedback_id(tmp_path):
    row = {"s_key": "m.1", "relation": "location.city.country", "o_key": "m.2",
           "s_name": "Febaville", "o_name": "Febaland", "phrase": "country", "chunk_id": "c1",
           "sentence_id": "s1", "sentence": "Febaville country Febaland.",
           "feedback_ids": ["f1", "f2"]}
    sq = fq.SubQuestion("m.1", "Febaville", "location.city.country", "", ["f1", "f2"])
    fd.persist(tmp_path / "deltas", "d1", fd.Delta([row], {sq.key: ["f1", "f2"]}), [sq],
               {"fingerprint": "x"}, 3)
    report = fd.consolidated(tmp_path / "deltas", tmp_path / "out")
    assert report == {"deltas": 1, "delta_triples": 1, "delta_aliases": 0}
    assert (tmp_path / "out" / "triples.tsv").read_text() == \
        "m.1\tlocation.city.country\tm.2\n"
    sources = pq.read_table(tmp_path / "out" / "sources.parquet").to_pylist()
    assert [(s["feedback_id"], s["chunk_id"], s["sentence_id"], s["delta_id"])
            for s in sources] == [("f1", "c1", "s1", "d1"), ("f2", "c1", "s1", "d1")]


def _published(names: list[str], chunks: list[str]):
    """A stand-in for :class:`fp.Published`: entity names, chunk texts, every chunk nearest."""
    class Pub:
        keys = [entity_key(n) for n in names]
        named = fp.Names(names)

        @staticmethod
        def nearest(texts, k, skips):
            return [list(range(skip, min(skip + k, len(chunks)))) for skip in skips]

    Pub.names, Pub.chunks = names, [{"text": t} for t in chunks]
    return Pub


def test_an_unlinked_name_becomes_an_alias_of_the_one_entity_it_means():
    """The 50-question run's "Aschenbrodel" (the graph: "Aschenbrödel") and "Hayek" (the graph:
    "Friedrich Hayek") never linked, so no round asked about them."""
    names = ["Aschenbrödel", "Aschenbrödel in 1900 orchestra", "Friedrich Hayek", "John Cabot",
             "John Gallo", "gravel walk", "3.16 million TEUs in 2013", "Leopold Godowsky"]
    pub = _published(names, ["Aschenbrödel is a waltz by Leopold Godowsky.",
                             "Friedrich August von Hayek was born in Vienna.",
                             "John Cabot sailed. A gravel walk. 3.16 million TEUs in 2013."])
    base = {"build_id": "b0", "kind": "chain_stop", "missing": [], "mentions": []}
    records = [{**base, "id": "a", "unlinked": ["Aschenbrodel", "John", "Walk"]},
               {**base, "id": "b", "unlinked": ["Hayek", "TEUs", "Aschenbrodel"]},
               {**base, "id": "c", "unlinked": ["Leopold Godowsky", "Nowhere"]}]
    sqs = fq.alias_questions(records)
    assert [(sq.name, sq.relation, sq.feedback_ids) for sq in sqs][:2] == [
        ("Aschenbrodel", fq.ALIAS, ["a", "b"]), ("John", fq.ALIAS, ["a"])]
    delta = fa.aliases(sqs, pub, 3)
    assert delta.aliases == {"aschenbrödel": {"name": "Aschenbrödel", "aliases": ["Aschenbrodel"]},
                             "friedrich hayek": {"name": "Friedrich Hayek", "aliases": ["Hayek"]}}
    assert sorted(delta.answered) == sorted(sq.key for sq in sqs if sq.name in
                                            ("Aschenbrodel", "Hayek"))
    # two Johns, a common noun, a name mostly of other words, one the graph has: nothing
    assert fa.aliases(sqs, _published(names, ["Nothing about them."]), 3).aliases == {}
    assert fq.sub_questions(records) == []  # the facts' and mentions' sub-questions: none


def test_a_name_asked_about_takes_the_triples_of_its_qualified_forms():
    """The Shringarpur question reaches "Maharashtra state"; the passage of the chief
    ministers says "Maharashtra": its triple joins the entity the question reached."""
    class Pub:
        by_form = {"maharashtra state": "maharashtra state", "maharashtra": "maharashtra"}
        id_of = {"maharashtra state": 0, "maharashtra": 1}
        names = ["Maharashtra state", "Maharashtra"]
        forms = fp.Published.forms
        end = fp.Published.end
        forms_of: dict = {}

    def ask(name, triple, entity="", relation=""):
        sq = fq.SubQuestion(entity, name, relation, name)
        cand = fa.oriented(fa.Candidate(sq, {}, triple), Pub())
        return None if cand is None else (cand.s, cand.o)

    chavan = ("Maharashtra", "chief minister", "Prithviraj Chavan")
    assert ask("Maharashtra state", chavan) == \
        (("maharashtra state", "Maharashtra state"), ("prithviraj chavan", "Prithviraj Chavan"))
    assert ask("Maharashtra", chavan) == \
        (("maharashtra", "Maharashtra"), ("prithviraj chavan", "Prithviraj Chavan"))
    assert ask("Fredericton, New Brunswick", ("Observatory", "in", "Fredericton"))[1] == \
        ("fredericton, new brunswick", "Fredericton, New Brunswick")
    assert ask("Neil Young", ("Neil Young Harvest", "by", "Crazy Horse")) is None  # another name
    assert ask("Maharashtra state", ("Maharashtra", "in", "Maharashtra state")) is None
    assert ask("Maharashtra state", chavan, entity="m.1", relation="r") is None  # a fact: keyed


@pytest.mark.spark
@pytest.mark.slow
def test_a_delta_alias_reaches_the_next_builds_entity(spark, tmp_path):
    """persist → consolidated → ingest: the alias joins the entity's own, and it needs no
    triple of its own (but ingest reads a delta only with one)."""
    from lokg.spark_jobs import ingest as stage

    delta = fd.Delta(rows=[{"s_key": "b", "relation": "near", "o_key": "c", "s_name": "B",
                            "o_name": "C", "phrase": "near", "chunk_id": "c1",
                            "sentence_id": "s1", "sentence": "", "feedback_ids": ["f1"]}],
                     aliases={"a": {"name": "Aschenbrödel", "aliases": ["Aschenbrodel"]}})
    sq = fq.SubQuestion("", "Aschenbrodel", fq.ALIAS, "Aschenbrodel", ["f1"])
    fd.persist(tmp_path / "deltas", "d1", delta, [sq], {"fingerprint": "x"}, 3)
    report = fd.consolidated(tmp_path / "deltas", tmp_path / "delta")
    assert report["delta_aliases"] == 1
    dump = tmp_path / "kg.tsv"
    dump.write_text("a\tby\tb\n")
    config = load_config(None, ["ingest.format=tsv", "engine.name=duckdb"])
    result = stage.run(config, {"dump": str(dump), "feedback_delta": str(tmp_path / "delta")},
                       str(tmp_path / "out"))
    entities = pq.read_table(result["outputs"]["entities"]).to_pylist()
    assert {e["key"]: e["aliases"] for e in entities} == {"a": ["Aschenbrodel"], "b": [], "c": []}


def test_store_without_a_published_build_writes_an_empty_delta_and_skips_bad_segments(tmp_path):
    store = tmp_path / "store"
    _log(store, {"id": "x", **_missing("m.1", "r")})
    (log_dir(store) / "0000000000000-0-h-1-bad.log").write_bytes(b"garbage line\n{\"torn")
    out = tmp_path / "out"
    out.mkdir()
    result = fe.run(load_config(None, []), {"store": str(store), "dump": str(tmp_path)}, str(out))
    report = result["report"]
    assert report["log_records"] == 1 and report["sub_questions"] == 1
    assert report["skipped_log_lines"] == 2
    assert any("torn" in why for why in report["skipped"])
    assert report["nothing_to_enrich"].startswith("nothing to enrich from")
    delta = Path(result["outputs"]["feedback_delta"])
    assert (delta / "triples.tsv").read_text() == ""
    assert pq.read_table(delta / "sources.parquet").num_rows == 0


def _openie(path: Path, title: str, triple: list[str]) -> Path:
    doc = {"title": title, "text": f"{title} text.", "extracted_triples": [triple]}
    path.write_text(json.dumps({"docs": [doc]}), encoding="utf-8")
    return path


def test_enrichment_reads_its_own_openie_file_when_set_else_the_builds(tmp_path):
    from lokg.text.chunking import content_id

    sparse = _openie(tmp_path / "sparse.json", "Febaville", ["Febaville", "in", "Nowhere"])
    full = _openie(tmp_path / "full.json", "Febaville", ["Febaville", "country", "Febaland"])
    chunk = {"chunk_id": "c1", "doc_id": content_id("Febaville", "Febaville text.")}
    base = [f"triple_extract.precomputed_file={sparse}"]
    for extra, expected in (([], "Nowhere"),
                            ([f"feedback_enrich.precomputed_file={full}"], "Febaland")):
        config = load_config(None, [*base, *extra])
        extraction = fe.Extraction(config, "precomputed", tmp_path, tmp_path)
        assert [t[2] for t in extraction.triples(chunk)] == [expected]


# ---------------------------------------------------------------------------------------------
# the loop through the driver (slow: two builds of a tiny synthetic dump)


def refresh_config(dump: Path) -> dict:
    from lokg.pipeline.synth import labelled_overrides

    return load_config(None, [*FAST, *labelled_overrides(dump)])


@pytest.fixture(scope="module")
def loop(tmp_path_factory):
    from lokg.pipeline.driver import build, run_stage
    from lokg.pipeline.synth import generate
    from lokg.runtime.contract import Store

    root = tmp_path_factory.mktemp("feedback-loop")
    dump, store = root / "dump", root / "store"
    generate(dump, n_triples=300, seed=3, n_questions=40, withhold=1)
    edge, question = withheld_question(dump)
    config = refresh_config(dump)
    first = build(str(dump), str(store), config)
    # the runtime logs what it found missing: the chain stop alone (no question passages)
    before = answers(store, question["question"], feedback_passages=0)
    logged = read_log(log_dir(store)).records
    (log_dir(store) / "0000000000000-0-h-1-bad.log").write_bytes(b"not a record\n")
    second = build(str(dump), str(store), config)
    after = answers(store, question["question"])
    again = run_stage(Store(store), "rerun", "feedback_enrich", config, str(dump))
    return {"store": store, "edge": edge, "question": question, "first": first, "logged": logged,
            "second": second, "before": before, "after": after, "again": again["report"]}


@pytest.mark.slow
def test_refresh_answers_the_question_the_first_build_could_not(loop):
    gold, edge = loop["question"]["answers"], loop["edge"]
    assert gold[0] not in loop["before"]
    (record,) = loop["logged"]  # what the first build's answer found missing, no LLM
    assert record["kind"] == "chain_stop"
    assert [(m["entity"], m["relation"]) for m in record["missing"]] == \
        [(edge["s"], edge["relation"])]
    assert loop["after"][:1] == gold
    report = loop["second"].manifest["report"]["stages"]
    assert report["feedback_enrich"]["answered"] == 1
    assert report["feedback_enrich"]["skipped_log_lines"] == 1
    assert report["ingest"]["feedback_edges_added"] == 1
    assert loop["first"].manifest["report"]["stages"]["ingest"]["triples"] + 1 == \
        report["ingest"]["triples"]


@pytest.mark.slow
def test_delta_triple_carries_its_feedback_lineage_and_sentence(loop):
    from lokg.runtime.cli import render_summary

    build, edge = loop["second"], loop["edge"]
    (row,) = build.read("feedback_lineage").to_pylist()
    keys = build.read("entities", columns=["key"])["key"].to_pylist()
    assert (keys[row["s"]], keys[row["o"]]) == (edge["s"], edge["o"])
    sources = build.read("triple_sources").to_pylist()
    assert [(s["chunk_id"], s["sentence_id"]) for s in sources
            if (s["s"], s["r"], s["o"]) == (row["s"], row["r"], row["o"])] == \
        [(row["chunk_id"], row["sentence_id"])]
    summary = render_summary(build)
    assert f"{edge['s_name']} -{edge['relation']}-> {edge['o_name']}" in summary
    assert edge["sentence"] in summary


@pytest.mark.slow
def test_a_later_refresh_closes_the_answered_sub_question(loop):
    again = loop["again"]
    assert again["closed_answered"] == 1 and again["enriched"] == 0
    assert again["delta_triples"] == 1  # the earlier delta stays in every later build


@pytest.mark.slow
def test_a_gold_off_every_linked_path_is_reached_after_one_refresh(tmp_path):
    """The withheld edge's head (the bridge) is taken out of the graph altogether, so the
    question's gold lies on no path from its topic: asking about the names it reached brings
    back at most the first hop a round. The record names the passages nearest the question;
    one enrich + rebuild adds both hops from them, and the answer's context holds the gold."""
    from lokg.pipeline.driver import build
    from lokg.pipeline.synth import generate
    from lokg.runtime.query import Runtime

    dump, store = tmp_path / "dump", tmp_path / "store"
    generate(dump, n_triples=300, seed=3, n_questions=40, withhold=1)
    edge, question = withheld_question(dump)
    bridge = f"/{edge['s']}>".encode()
    for name in ("kg.nt", "kg.tsv"):
        lines = (dump / name).read_bytes().splitlines(keepends=True)
        (dump / name).write_bytes(b"".join(l for l in lines if bridge not in l
                                           and edge["s"].encode() + b"\t" not in l
                                           and b"\t" + edge["s"].encode() not in l))
    config = refresh_config(dump)
    build(str(dump), str(store), config)
    first = answers(store, question["question"])
    (record,) = read_log(log_dir(store)).records
    assert record["passages"] and question["answers"][0] not in first
    build(str(dump), str(store), config)
    rows = [r for p in sorted((store / "feedback" / "deltas").glob("*.parquet"))
            for r in pq.read_table(p).to_pylist()]
    assert (edge["s_name"], edge["o_name"]) in {(r["s_name"], r["o_name"]) for r in rows}
    runtime = Runtime.open(store, feedback=False)
    try:
        answer = runtime.ask(question["question"], llm="none")
    finally:
        runtime.close()
    assert any(question["answers"][0] in t["line"] for t in answer.triples)
