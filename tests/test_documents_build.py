"""End to end from documents (issue 15): a corpus and its extraction → lokg build → a verified
store whose triples know their sources → answers that carry restored sentences and citations."""

from __future__ import annotations

import pytest

from lokg.pipeline import driver
from lokg.pipeline.config import load_config
from lokg.runtime.contract import Store
from lokg.runtime.query import Runtime
from lokg.testing.dumps import CITIES, PEOPLE, corpus, write_corpus

pytestmark = pytest.mark.spark


def build_corpus(root, backend: str):
    dump = root / "corpus"
    docs, openie = corpus()
    write_corpus(dump, docs, openie)
    config = load_config(None, [f"triple_extract.backend={backend}", "transe.epochs=5",
                                "gat.epochs=3"])
    return driver.build(str(dump), str(root / "store"), config, log=lambda _: None), docs


@pytest.fixture(scope="module")
def built(tmp_path_factory, spark):
    """The exact extraction (precomputed): the counts are known."""
    return build_corpus(tmp_path_factory.mktemp("docs-build"), "precomputed")


def test_every_triple_has_a_source_sentence_that_holds_its_head(built):
    build, docs = built
    report = build.manifest["report"]["stages"]
    assert report["documents"]["documents"] == len(docs)
    assert report["documents"]["rejected"] == 1
    assert build.rows("triples") == len(CITIES) + 2 * len(PEOPLE)
    names = build.read("entities", columns=["name"]).column("name").to_pylist()
    sentences = dict(zip(*(build.read("sentences").column(c).to_pylist()
                           for c in ("sentence_id", "text"))))
    sources = build.read("triple_sources").to_pylist()
    assert {(s["s"], s["r"], s["o"]) for s in sources} == set(
        zip(*(build.read("triples").column(c).to_pylist() for c in "sro")))
    assert all(names[s["s"]].split()[0] in sentences[s["sentence_id"]] for s in sources)
    assert build.rows("triple_context") == build.rows("triples")
    assert (build.path / "chunk_vectors.npy").is_file()
    assert (build.path / "reports" / "document_quarantine.parquet").is_file()
    Store(build.root).build(verify=True)


def test_an_answer_cites_its_sources_and_offers_the_restored_sentence(built):
    build, _ = built
    person, city = PEOPLE[4], CITIES[12 % len(CITIES)]
    with Runtime.open(build.root) as rt:
        answer = rt.ask(f"Where was {person} born?", budget=2048, policy="lokg",
                        passage_items=0)
        plain = rt.ask(f"Where was {person} born?", budget=2048, policy="lokg",
                       source_sentences=False, passage_items=0)
    assert city in [c["name"] for c in answer.candidates]
    born = [t for t in answer.triples if t["s"] == person and t["r"] == "born in"]
    assert born and born[0]["granularity"] == "verbose"
    assert f"was born in {city} in 1954, during a storm" in born[0]["line"]
    assert "during a storm" not in "".join(t["line"] for t in plain.triples)
    cited = [c for c in answer.citations if c["title"] == person]
    assert cited and f"born in {city}" in cited[0]["sentence"] and cited[0]["chunk_id"]


@pytest.mark.slow  # a second build (~3 min on 2 cores): the precomputed one covers the wiring
def test_the_offline_extractor_builds_a_typed_store_that_cites(tmp_path, spark):
    """The default backend end to end: spaCy's types become the entity types (rule explicit)."""
    build, _ = build_corpus(tmp_path, "offline")
    report = build.manifest["report"]["stages"]
    assert report["triple_extract"]["backend"] == "offline"
    assert report["entity_types"]["rule"] == "explicit"
    assert report["triple_context"]["head_in_a_source"] == report["triple_context"][
        "triples_with_sources"] == build.rows("triples")
    person, city = PEOPLE[4], CITIES[12 % len(CITIES)]
    with Runtime.open(build.root) as rt:
        answer = rt.ask(f"Where was {person} born?", budget=1024, policy="lokg")
    assert city in [c["name"] for c in answer.candidates]
    assert any(c["title"] == person and "born in" in c["sentence"] for c in answer.citations)


def test_passage_seeds_are_the_triples_of_the_nearest_chunks(built):
    build, _ = built
    chunks = build.read("chunks", columns=["chunk_id"]).column("chunk_id").to_pylist()
    sources = build.read("triple_sources").to_pylist()
    with Runtime.open(build.root) as rt:
        vectors = rt.provenance.chunk_vectors
        for row in (0, len(CITIES) + 3):  # a city's article, a person's
            expected = {(r["s"], r["r"], r["o"]) for r in sources if r["chunk_id"] == chunks[row]}
            assert expected and set(rt.provenance.passage_triples(vectors[row], 1)) == expected
        assert rt.provenance.passage_triples(vectors[0], 0) == []
        rt.settings = {**rt.settings, "passages": 0}
        alone = rt.ask(f"Where was {PEOPLE[4]} born?", budget=4096, policy="lokg",
                       passage_items=0)
        rt.settings = {**rt.settings, "passages": 3}
        seeded = rt.ask(f"Where was {PEOPLE[4]} born?", budget=4096, policy="lokg",
                        passage_items=0)
    assert {(t["s"], t["o"]) for t in alone.triples} < {(t["s"], t["o"]) for t in seeded.triples}


def test_the_graph_ranking_seeds_passages_from_the_dense_scores_and_the_links(built):
    """query.passage_ranking graph (runtime/passage_rank.py) on a real build: a chunk's own
    vector ranks it first with nothing linked, and a question's answer keeps its born-in fact."""
    build, _ = built
    person, city = PEOPLE[4], CITIES[12 % len(CITIES)]
    with Runtime.open(build.root, passage_ranking="graph") as rt:
        prov, row = rt.provenance, len(CITIES) + 3
        assert prov.ranked_rows(prov.chunk_vectors[row], [], 1) == [row]
        assert prov.ranked_rows(None, [], 3) == []
        answer = rt.ask(f"Where was {person} born?", budget=4096, policy="lokg")
    assert city in [c["name"] for c in answer.candidates]


def test_a_passage_item_cites_its_chunk_sentence_by_sentence(built):
    """query.passage_items: the best-ranked chunks are offered to ITTC; an emitted one comes
    first in the knowledge, its triples are not repeated, and it cites its own sentences."""
    build, _ = built
    person, city = PEOPLE[4], CITIES[12 % len(CITIES)]
    sentences = build.read("sentences", columns=["sentence_id", "chunk_id", "text"]).to_pylist()
    with Runtime.open(build.root) as rt:
        answer = rt.ask(f"Where was {person} born?", budget=256, policy="lokg", passage_items=2)
        with pytest.raises(ValueError, match="passage_items"):
            rt.ask(f"Where was {person} born?", passage_items=-1)
    assert answer.passages
    first = answer.passages[0]
    assert first["granularity"] in ("sentences", "passage") and first["cost"] <= 256
    assert answer.tokens["knowledge"] <= 256
    cited = [c for c in answer.citations if c["basis"] == "passage"]
    held = {s["sentence_id"]: s for s in sentences}
    assert cited and all(held[c["sentence_id"]]["chunk_id"] == c["chunk_id"] and
                         held[c["sentence_id"]]["text"] in first["line"] for c in cited
                         if c["chunk_id"] == first["chunk_id"])
    assert any(city in p["line"] for p in answer.passages)


def test_a_passage_items_sentences_are_those_nearest_the_question(built):
    """The build's sentence vectors (triple_context) choose a chunk's sentences option: a
    question vector equal to one sentence's picks that sentence; none keeps the sources'."""
    from lokg.runtime.passage_items import passage_items

    build, _ = built
    sentences = build.read("sentences", columns=["sentence_id", "chunk_id"]).to_pylist()
    chunks = build.read("chunks", columns=["chunk_id"]).column("chunk_id").to_pylist()
    with Runtime.open(build.root) as rt:
        prov = rt.provenance
        assert prov.sentence_vectors.shape == (len(sentences), prov.chunk_vectors.shape[1])
        row, target = next((chunks.index(s["chunk_id"]), i) for i, s in enumerate(sentences)
                           if len(prov.chunk_sentences(s["chunk_id"])) > 1 and
                           prov.chunk_sentences(s["chunk_id"])[-1][0] == s["sentence_id"])
        [item] = passage_items(prov, [row], [1.0], [], prov.sentence_vectors[target])
        [plain] = passage_items(prov, [row], [1.0], [], None)
    assert sentences[target]["sentence_id"] in [sid for sid, _ in item.sentences]
    assert len(item.sentences) < len(item.all_sentences) and 0.5 <= item.share <= 1.0
    assert plain.share is None


@pytest.mark.parametrize("choice, gap, matched", [
    ("sources", 10.0, False), ("question", -1.0, True), ("auto", 10.0, True),
    ("auto", -1.0, False), (None, 10.0, True)])  # auto by default
def test_query_passage_sentences_says_whether_the_question_chooses_them(built, monkeypatch,
                                                                         choice, gap, matched):
    from lokg.runtime import context, passage_items

    build, _ = built
    offered = []
    monkeypatch.setattr(passage_items, "CONCENTRATION_GAP", gap)  # auto: never/always concentrated
    monkeypatch.setattr(context, "passage_items", lambda *a: offered.append(a[4]) or [])
    with Runtime.open(build.root, **({"passage_sentences": choice} if choice else {})) as rt:
        rt.ask(f"Where was {PEOPLE[4]} born?", budget=256, policy="lokg", passage_items=2)
    assert len(offered) == 1 and (offered[0] is not None) == matched
