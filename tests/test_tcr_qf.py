"""Online feedback ``tcr-qf`` (evaluation/tcr_qf.py) on the toy family graph of
lokg.testing.family with facts withheld and documents that state them: the loop answers
over an in-memory overlay (runtime/overlay.py) what the store cannot, round by round, within
I_max, and the store stays byte for byte as it was; answer-driven feedback extracts from the
answer, not from passages."""

from __future__ import annotations

import hashlib
import json
import re
import zlib
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from lokg.evaluation.context import MethodError
from lokg.evaluation.tcr_qf import Enricher, answer_passage
from lokg.pipeline.config import load_config
from lokg.runtime.contract import TABLE_SCHEMAS, write_table
from lokg.runtime.query import Runtime
from lokg.text.chunking import content_id

QUESTION = "what is the job of edda quist 's wife ?"
EDDA, FABIO, PILOT = 4, 5, 63  # fabio quist is edda quist's wife; his profession: pilot
#: one document a fact (the first two are what the graph lacks), one the graph already has
DOCUMENTS = [("fabio quist", "profession", "pilot"), ("edda quist", "spouse", "fabio quist"),
             ("greta quist", "profession", "weaver")]


class BagEncoder:
    """A stand-in passage encoder: hashed bag of words, unit length (same words, cosine 1)."""

    dim = 64

    def encode_passages(self, texts):
        out = np.zeros((len(texts), self.dim), np.float32)
        for i, text in enumerate(texts):
            for word in re.findall(r"\w+", text.lower()):
                out[i, zlib.crc32(word.encode()) % self.dim] += 1.0
        return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-9)

    encode_queries = encode_passages


def document_tables(root: Path) -> tuple[dict, dict, Path]:
    """documents, chunks, sentences (one of each a fact), chunk_vectors.npy, the OpenIE file."""
    root.mkdir(parents=True)
    rows = {"documents": [], "chunks": [], "sentences": []}
    docs = []
    for i, triple in enumerate(DOCUMENTS):
        title, text = triple[0], " ".join(triple) + "."
        doc_id = content_id(title, text)
        rows["documents"].append({"doc_id": doc_id, "title": title, "source": "t", "chars": len(text)})
        rows["chunks"].append({"chunk_id": f"c{i}", "doc_id": doc_id, "ordinal": 0, "start": 0,
                               "end": len(text), "tokens": 8, "text": text})
        rows["sentences"].append({"sentence_id": f"s{i}", "doc_id": doc_id, "chunk_id": f"c{i}",
                                  "ordinal": 0, "start": 0, "end": len(text), "text": text})
        docs.append({"title": title, "text": text, "extracted_triples": [list(triple)]})
    tables = {}
    for name, table_rows in rows.items():
        tables[name] = root / f"{name}.parquet"
        write_table(name, pa.Table.from_pylist(table_rows, schema=TABLE_SCHEMAS[name]),
                    tables[name])
    np.save(root / "chunk_vectors.npy", BagEncoder().encode_passages(
        [c["text"] for c in rows["chunks"]]))
    openie = root / "openie.json"
    openie.write_text(json.dumps({"docs": docs}), encoding="utf-8")
    return tables, {"chunk_vectors.npy": root / "chunk_vectors.npy"}, openie


def gap_store(root: Path, withheld: set[tuple[int, int, int]]) -> tuple[Path, Path]:
    from lokg.testing.family import REL, family_triples, fitted_store

    tables, files, openie = document_tables(root / "docs")
    triples = [t for t in family_triples() if t not in withheld]
    assert len(triples) == len(family_triples()) - len(withheld)
    assert (FABIO, REL["profession"], PILOT) in family_triples()
    return fitted_store(root, triples, tables=tables, files=files)[0], openie


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    """One store lacking fabio's profession, one lacking the couple's spouse facts too."""
    from lokg.testing.family import REL

    job = {(FABIO, REL["profession"], PILOT)}
    spouse = {(EDDA, REL["spouse"], FABIO), (FABIO, REL["spouse"], EDDA)}
    return {"job": gap_store(tmp_path_factory.mktemp("job"), job),
            "both": gap_store(tmp_path_factory.mktemp("both"), job | spouse)}


def digest(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def enricher(rt, openie: Path, work: Path, **kwargs) -> Enricher:
    config = load_config(None, ["feedback_enrich.backend=precomputed",
                                f"feedback_enrich.precomputed_file={openie}"])
    return Enricher(rt, config=config, work=work, encoder=BagEncoder(), **kwargs)


def ask(view):
    return view.ask(QUESTION, llm="none", policy="route")


def test_a_withheld_fact_found_online_answers_round_two_and_the_store_is_untouched(stores,
                                                                                    tmp_path):
    store, openie = stores["job"]
    before = digest(store)
    rt = Runtime.open(store, feedback=False)
    online = enricher(rt, openie, tmp_path / "work").answer(rt, ask)
    assert "pilot" not in online.answers[0].answers
    assert online.answers[0].route["stopped"]["hop"] == "profession"
    assert [t.key for t in online.extra] == [("e5", "profession", "e63")]
    assert online.extra[0].sentence == "fabio quist profession pilot."
    assert [a.answers for a in online.answers][1:] == [["pilot"]]
    assert online.stopped == "nothing_missing"
    assert ask(rt).answers == online.answers[0].answers  # the runtime itself is unchanged
    rt.close()  # its pin (a reader's file, there while it is open) goes
    assert digest(store) == before


def test_each_round_asks_what_the_last_one_found_missing_and_i_max_bounds_the_rounds(stores,
                                                                                     tmp_path):
    store, openie = stores["both"]
    rt = Runtime.open(store, feedback=False)
    loop = enricher(rt, openie, tmp_path / "work")
    assert loop.max_rounds == 3  # tcr_qf.max_rounds' default
    three = loop.answer(rt, ask)
    assert [a.route["stopped"]["hop"] for a in three.answers[:2]] == ["spouse", "profession"]
    assert [t.key for t in three.extra] == [("e4", "spouse", "e5"), ("e5", "profession", "e63")]
    assert three.answers[-1].answers == ["pilot"] and three.stopped == "nothing_missing"
    # the fact, the topic edda quist and 3 bridge entities the answer reached (feedback_bridges);
    # then the next fact and the one bridge the second answer reached that was neither asked
    # yet nor the stop's own entity (fabio quist, asked as the fact)
    assert three.asked == [5, 2]
    two = loop.answer(rt, ask, max_rounds=2)
    assert len(two.answers) == 2 and two.stopped == "max_rounds"
    assert "pilot" not in two.answers[-1].answers
    assert [t.key for t in two.extra] == [("e4", "spouse", "e5")]
    one = loop.answer(rt, ask, max_rounds=1)
    assert (len(one.answers), one.extra, one.stopped) == (1, [], "max_rounds")
    with pytest.raises(MethodError, match="max_rounds"):
        loop.answer(rt, ask, max_rounds=0)


class AnswerReader:
    """A stand-in extractor that knows fabio's job from any text naming him, and records
    every text it was given."""

    def __init__(self):
        self.texts, self.calls = [], 0
        self.usage = {"prompt_tokens": 0, "completion_tokens": 0}

    def triples(self, chunk):
        self.texts.append(chunk["text"])
        return [["fabio quist", "profession", "pilot"]] if "fabio quist" in chunk["text"] else []


def test_answer_driven_feedback_extracts_from_the_answer_not_from_passages(stores, tmp_path):
    store, openie = stores["job"]
    rt = Runtime.open(store, feedback=False)
    with pytest.raises(MethodError, match="precomputed"):
        enricher(rt, openie, tmp_path / "a", source="answer")
    config = load_config(None, ["feedback_enrich.backend=offline"])
    reader = AnswerReader()
    loop = Enricher(rt, config=config, work=tmp_path / "b", encoder=BagEncoder(),
                    extraction=reader, source="answer")
    online = loop.answer(rt, ask)
    first = online.answers[0]
    assert set(reader.texts) == {answer_passage(first)["text"]}  # the answer's, no passage
    assert reader.texts[0].startswith(f"{first.answers[0]}.\n")
    assert "edda quist spouse fabio quist." in reader.texts[0]  # its context, as sentences
    assert [a.answers for a in online.answers][1:] == [["pilot"]]


def test_the_work_directory_may_not_be_in_the_store(stores):
    store, openie = stores["job"]
    rt = Runtime.open(store, feedback=False)
    with pytest.raises(MethodError, match="inside the store"):
        enricher(rt, openie, store / "scratch")
    assert not (store / "scratch").exists()


class HobbyReader(AnswerReader):
    """Knows one new fact about edda quist, with an entity and a relation the graph lacks."""

    def triples(self, chunk):
        self.texts.append(chunk["text"])
        return [["edda quist", "hobby", "chess club"]]


def test_new_entities_and_relations_join_the_overlay_and_nothing_new_to_ask_stops(stores,
                                                                                   tmp_path):
    store, _ = stores["job"]
    rt = Runtime.open(store, feedback=False)
    loop = Enricher(rt, config=load_config(None, ["feedback_enrich.backend=offline"]),
                    work=tmp_path, encoder=BagEncoder(), extraction=HobbyReader(),
                    source="answer")
    online = loop.answer(rt, ask)
    (triple,) = online.extra
    assert (triple.s_key, triple.relation, triple.o_name) == ("e4", "hobby", "chess club")
    assert online.asked == [5, 0] and online.stopped == "nothing_new_asked"  # 2 + 3 bridges
    view = rt.with_triples(online.extra)
    new = rt.n_entities
    assert view.n_entities == new + 1 and view.keys[new] == triple.o_key
    assert view.linker.lookup("Chess Club") == (new,) and rt.linker.lookup("chess club") == ()
    hobby = next(r for r, name in view.relation_names.items() if name == "hobby")
    assert hobby >= rt.n_relations and "hobby" not in rt.relation_names.values()
    assert (EDDA, hobby, new) in view.neighbourhood([EDDA])


def test_the_methods_are_registered_and_refuse_a_store_without_its_encoder(stores):
    from lokg.evaluation.context import CountingLLM, EvalContext
    from lokg.evaluation.methods import METHODS
    from lokg.runtime.llm import make_llm

    rt = Runtime.open(stores["job"][0], feedback=False)
    ctx = EvalContext(runtime=rt, llm=CountingLLM(make_llm("none")))
    for name in ("tcr-qf", "tcr-qf-answer"):
        assert METHODS[name].documents_only
        with pytest.raises(MethodError, match="no encoder"):
            METHODS[name].factory(ctx)
