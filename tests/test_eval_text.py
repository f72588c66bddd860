"""Text-QA evaluation: the MuSiQue/HotpotQA adapters and their corpus, the SQuAD EM/F1 and
context recall, reading runs of the runner, the lokg/lokg-tcr methods (a test-double runtime)
and the chunk-RAG baseline on a fixture build (a chunks table, vectors, a stub encoder)."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lokg.evaluation import baselines
from lokg.evaluation.context import CountingLLM, EvalContext, MethodError
from lokg.common.datasets import DatasetError, Question
from lokg.evaluation.methods import METHODS, make_methods, method_names
from lokg.common.metrics import READING_KEYS, SUMMARY_KEYS, contains_answer, read_scores, \
    squad_normalise
from lokg.evaluation.runner import PREDICTIONS, Prediction, evaluate
from lokg.evaluation.text_datasets import READING_SETS, load_reading_file, load_reading_set, \
    write_corpus
from lokg.runtime.answer_record import Answer
from lokg.runtime.contract import Build
from lokg.runtime.llm import Completion
from lokg.runtime.llm.none import NoLLM
from lokg.runtime.tokens import count_tokens
from lokg.text.chunking import content_id

P1 = {"idx": 0, "title": "Journal of Psychotherapy Integration",
      "paragraph_text": "It is published by the American Psychological Association.",
      "is_supporting": True}
P2 = {"idx": 1, "title": "American Psychological Association",
      "paragraph_text": "Its first president was G. Stanley Hall.", "is_supporting": True}
P3 = {"idx": 2, "title": "Lilu", "paragraph_text": "Lilu is a spirit.", "is_supporting": False}
MUSIQUE = [
    {"id": "2hop__1", "question": "Who was the first president of the association which "
     "published Journal of Psychotherapy Integration?", "answer": "G. Stanley Hall",
     "answer_aliases": ["Stanley Hall", "G. Stanley Hall"], "answerable": True,
     "paragraphs": [P1, P2, P3]},
    {"id": "2hop__2", "question": "What is Lilu?", "answer": "a spirit", "answer_aliases": [],
     "paragraphs": [P3, {**P1, "idx": 1, "is_supporting": False}]},
]
HOTPOT = [
    {"_id": "5a77", "question": "If Gallu is a demon Lilu is what?", "answer": "a spirit",
     "supporting_facts": [["Lilu (mythology)", 0]], "type": "bridge", "level": "easy",
     "context": [["Lilu (mythology)", ["A lilu is a spirit.", " It haunts the desert."]],
                 ["Gallu", ["Gallu is a demon."]]]},
    {"_id": "5a78", "question": "Is Gallu a demon?", "answer": "yes",
     "supporting_facts": [["Gallu", 0]],
     "context": [["Gallu", ["Gallu is a demon."]], ["Empty", []]]},
]


def _json(tmp_path, name, records):
    path = tmp_path / name
    path.write_text(json.dumps(records))
    return path


def _jsonl(tmp_path, name, lines):
    path = tmp_path / name
    path.write_text("".join(line + "\n" for line in lines))
    return path


# --------------------------------------------------------------------------------------------
# adapters


@pytest.mark.parametrize("form", ["json", "jsonl"])
def test_musique_questions_and_corpus(tmp_path, form):
    path = _json(tmp_path, "q.json", MUSIQUE) if form == "json" else \
        _jsonl(tmp_path, "q.jsonl", [json.dumps(r) for r in MUSIQUE])
    got = load_reading_file(path, "musique")
    first, second = got.dataset.questions
    assert first.id == "2hop__1" and first.question.startswith("Who was the first")
    assert first.answers == ("G. Stanley Hall", "Stanley Hall")  # aliases, de-duplicated
    assert first.topic_entities == () and first.path == ()  # entities come from the linker
    assert second.answers == ("a spirit",)
    # P1 and P3 recur (P1 with another idx/is_supporting): the union by (title, text), once each
    assert [(d.title, d.text) for d in got.documents] == [
        (p["title"], p["paragraph_text"]) for p in (P1, P2, P3)]
    assert got.documents[0].id == content_id(P1["title"], P1["paragraph_text"])  # the doc_id
    assert got.dataset.kind == "musique" and got.dataset.kb_format == "docs"


@pytest.mark.parametrize("form", ["json", "jsonl"])
def test_hotpotqa_questions_and_corpus(tmp_path, form):
    path = _json(tmp_path, "h.json", HOTPOT) if form == "json" else \
        _jsonl(tmp_path, "h.jsonl", [json.dumps(r) for r in HOTPOT])
    got = load_reading_file(path, "hotpotqa")
    assert [q.id for q in got.dataset.questions] == ["5a77", "5a78"]
    assert got.dataset.questions[0].answers == ("a spirit",)
    assert all(q.topic_entities == () for q in got.dataset.questions)
    # title -> sentences joined as written; "Gallu" twice is one document; no empty one
    assert [(d.title, d.text) for d in got.documents] == [
        ("Lilu (mythology)", "A lilu is a spirit. It haunts the desert."),
        ("Gallu", "Gallu is a demon.")]


def test_malformed_line_names_file_and_line(tmp_path):
    path = _jsonl(tmp_path, "bad.jsonl", [json.dumps(MUSIQUE[0]), "{not json"])
    with pytest.raises(DatasetError, match=rf"{path}:2: not JSON"):
        load_reading_file(path, "musique")


@pytest.mark.parametrize("shape, record, message", [
    ("musique", {**MUSIQUE[0], "answer": ""}, "'answer' must be a non-empty string"),
    ("musique", {**MUSIQUE[0], "paragraphs": [{"title": "t"}]}, "paragraph 0"),
    ("musique", {**MUSIQUE[0], "answer_aliases": "Hall"}, "'answer_aliases' must be a list"),
    ("hotpotqa", {**HOTPOT[0], "context": [["t", "not a list"]]}, "context entry 0"),
    ("hotpotqa", {k: v for k, v in HOTPOT[0].items() if k != "_id"}, "'_id'"),
])
def test_bad_records_are_named(tmp_path, shape, record, message):
    path = _jsonl(tmp_path, "q.jsonl", [json.dumps(MUSIQUE[1] if shape == "musique"
                                                   else HOTPOT[1]), json.dumps(record)])
    with pytest.raises(DatasetError, match=rf"{path}:2: .*{message}"):
        load_reading_file(path, shape)
    array = _json(tmp_path, "q.json", [record])
    with pytest.raises(DatasetError, match=rf"{array}: record 0: .*{message}"):
        load_reading_file(array, shape)


def test_duplicate_ids_and_unknown_names(tmp_path):
    path = _json(tmp_path, "q.json", [MUSIQUE[0], MUSIQUE[0]])
    with pytest.raises(DatasetError, match="record 1: duplicate id '2hop__1'"):
        load_reading_file(path, "musique")
    with pytest.raises(DatasetError, match="unknown; choose musique-openie"):
        load_reading_set("squad", tmp_path)
    with pytest.raises(DatasetError, match="not found"):
        load_reading_set("musique-200", tmp_path)


def test_write_corpus_is_docs_jsonl(tmp_path):
    docs = load_reading_file(_json(tmp_path, "q.json", MUSIQUE), "musique").documents
    path = write_corpus(docs, tmp_path / "out" / "corpus.jsonl")
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert rows == [{"id": d.id, "title": d.title, "text": d.text} for d in docs]
    assert len({r["id"] for r in rows}) == 3 and not list(path.parent.glob("*.partial"))


def test_shared_reading_sets(shared_data):
    sizes = {"musique-openie": (100, 1890), "hotpotqa-100": (100, 994)}
    for name in READING_SETS:
        got = load_reading_set(name, shared_data)
        assert len(got.dataset.questions) in (100, 200)
        assert all(q.answers and not q.topic_entities for q in got.dataset.questions)
        if name in sizes:  # the corpus.json the set ships with: the same union
            assert (len(got.dataset.questions), len(got.documents)) == sizes[name]


# --------------------------------------------------------------------------------------------
# metrics


def test_squad_normalisation():
    assert squad_normalise("The  Eiffel-Tower!") == "eiffeltower"  # punctuation deleted
    assert squad_normalise("U.S.A.") == squad_normalise("usa") == "usa"
    assert squad_normalise("Anna and an apple") == "anna and apple"  # articles as words only


@pytest.mark.parametrize("predicted, gold, em, f1", [
    (["the Beatles"], ["Beatles"], 1.0, 1.0),  # article
    (["Beatles."], ["The Beatles"], 1.0, 1.0),  # punctuation
    (["Stanley Hall"], ["G. Stanley Hall", "Stanley Hall"], 1.0, 1.0),  # the alias
    (["Hall"], ["G. Stanley Hall", "Stanley Hall"], 0.0, pytest.approx(2 / 3)),  # best alias
    (["Hall"], ["G. Stanley Hall"], 0.0, pytest.approx(0.5)),
    (["the cat sat"], ["cat sat on mat"], 0.0, pytest.approx(2 / 3)),
    (["wrong", "Beatles"], ["Beatles"], 0.0, 0.0),  # only the first answer counts
    ([], ["Beatles"], 0.0, 0.0),  # reader none / no answer
    (["..."], ["Beatles"], 0.0, 0.0),
])
def test_em_and_f1(predicted, gold, em, f1):
    got = read_scores(predicted, gold, "")
    assert (got.em, got.f1) == (em, f1)


def test_context_recall():
    knowledge = ("Journal of Psychotherapy Integration | published by | American Psychological "
                 "Association\nAmerican Psychological Association | founded | 1892\n")
    assert contains_answer(knowledge, ["the American Psychological Association"])
    assert contains_answer(knowledge, ["APA", "american psychological association."])  # alias
    assert not contains_answer(knowledge, ["G. Stanley Hall", "Stanley Hall"])
    assert not contains_answer(knowledge, ["189"])  # word boundaries: not inside 1892
    assert contains_answer(knowledge, ["1892"])
    assert not contains_answer("", ["1892"]) and not contains_answer(knowledge, ["the"])
    assert read_scores(["x"], ["1892"], knowledge).context_recall == 1.0
    assert read_scores(["1892"], ["1892"], "").context_recall == 0.0


# --------------------------------------------------------------------------------------------
# runner: reading runs

QUESTIONS = (Question("a", "Who?", ("G. Stanley Hall", "Stanley Hall")),
             Question("b", "What?", ("a spirit",)))


def _fake(q: Question) -> Prediction:
    if q.id == "a":  # right, knowledge holds it
        return Prediction(["Stanley Hall"], knowledge="APA | president | G. Stanley Hall\n")
    return Prediction(["spirits"], knowledge="Lilu | is | demon\n")  # wrong, not in knowledge


def test_reading_run_records_and_summary(tmp_path):
    summary = evaluate({"m": _fake}, QUESTIONS, tmp_path, progress=False, reading=True)["m"]
    assert tuple(summary) == SUMMARY_KEYS + READING_KEYS
    assert (summary["EM"], summary["F1-SQuAD"], summary["context_recall"]) == (0.5, 0.5, 0.5)
    first = json.loads((tmp_path / "m" / PREDICTIONS).read_text().splitlines()[0])
    assert first["knowledge"] == "APA | president | G. Stanley Hall\n"
    assert first["reading"] == {"EM": 1.0, "F1-SQuAD": 1.0, "context_recall": 1.0}
    # resumed: recomputed from the lines, the same
    again = evaluate({"m": _fake}, QUESTIONS, tmp_path, progress=False, reading=True)["m"]
    assert again == summary
    plain = evaluate({"m": _fake}, QUESTIONS, tmp_path / "kg", progress=False)["m"]
    assert tuple(plain) == SUMMARY_KEYS  # a run without reading is unchanged


# --------------------------------------------------------------------------------------------
# lokg and lokg-tcr (a test-double runtime: the source_sentences keyword is the contract)

LINES = ["Journal | published by | APA\n", "APA | first president | G. Stanley Hall\n"]


class DoubleRuntime:
    """Records each ask's keywords; answers with two encoded triples, one dropped."""

    build_id = "b-test"

    def __init__(self):
        self.asked: list[dict] = []

    def ask(self, question, **kw) -> Answer:
        self.asked.append(kw)
        triples = [{"s": "x", "r": "y", "o": "z", "granularity": "verbose", "cost": 7,
                    "line": line} for line in LINES]
        return Answer(
            question=question, answers=["G. Stanley Hall"], answer_ids=[3], status="ok",
            message="", fallback=False, fallback_reason=None, llm={}, llm_calls=0,
            prompt={"system": "", "user": ""},
            tokens={"prompt": 0, "completion": 0, "knowledge": 14, "naive": 20},
            triples=triples, linked=[], candidates=[], encoding={"mode": "dp", "dropped": 1},
            timings={}, build_id=self.build_id, retrieval="taimr", policy="lokg")


@pytest.mark.parametrize("name, expected", [("lokg", False), ("lokg-tcr", True)])
def test_lokg_methods_pass_source_sentences(name, expected):
    rt = DoubleRuntime()
    ctx = EvalContext(rt, CountingLLM(NoLLM()), budget=512, entities="link")
    pred = make_methods([name], ctx)[name](QUESTIONS[0])
    assert rt.asked[0]["source_sentences"] is expected
    assert rt.asked[0]["budget"] == 512 and rt.asked[0]["entities"] is None
    assert pred.knowledge == "".join(LINES)  # the encoded knowledge, without a prompt
    assert read_scores(pred.answers, QUESTIONS[0].answers, pred.knowledge).context_recall == 1


def test_documents_methods_stay_out_of_all():
    assert {"lokg-tcr", "chunk-rag"} <= set(METHODS)
    assert not {"lokg-tcr", "chunk-rag"} & set(method_names("all"))
    assert method_names("lokg,lokg-tcr,chunk-rag") == ["lokg", "lokg-tcr", "chunk-rag"]


# --------------------------------------------------------------------------------------------
# chunk-RAG on a fixture build

CHUNKS = [  # (chunk id, doc id, text, unit vector)
    ("c0", "d0", "Lothair II was the son of Ermengarde of Tours, born in 835.", (0.6, 0.8)),
    ("c1", "d1", "Ermengarde of Tours   died\nin 851 at the abbey.", (-1.0, 0.0)),
    ("c2", "d0", "Lothair II became king of Lotharingia in 855.", (1.0, 0.0)),
]
TITLES = {"d0": "Lothair II", "d1": "Ermengarde of Tours"}
QUESTION = Question("q", "When did Lothair II become king?", ("855",))


class StubEncoder:
    """A unit-test double of the store's encoder: the question points along x."""

    dim = 2

    def __init__(self):
        self.passages: list[list[str]] = []

    def encode_queries(self, texts):
        return np.array([[1.0, 0.0]] * len(texts), dtype=np.float32)

    def encode_passages(self, texts):
        self.passages.append(list(texts))
        return np.array([dict((t, v) for _, _, t, v in CHUNKS)[t] for t in texts],
                        dtype=np.float32)


class ChunkStore:
    """What chunk-rag reads of a runtime: the open build, its id, its encoder."""

    def __init__(self, build: Build, encoder):
        self.build, self.build_id, self._encoder = build, build.build_id, encoder

    def encoder(self):
        return self._encoder


def _build(tmp_path, *, vectors=True, chunks=True) -> Build:
    path = tmp_path / "builds" / "b1"
    path.mkdir(parents=True)
    tables = {"documents": {"path": "documents.parquet"}}
    pq.write_table(pa.table({"doc_id": list(TITLES), "title": list(TITLES.values()),
                             "source": ["s", "s"], "chars": [1, 1]}), path / "documents.parquet")
    if chunks:
        tables["chunks"] = {"path": "chunks.parquet"}
        pq.write_table(pa.table({
            "chunk_id": [c[0] for c in CHUNKS], "doc_id": [c[1] for c in CHUNKS],
            "ordinal": pa.array([0, 0, 1], pa.int32()), "start": [0, 0, 60], "end": [60, 45, 105],
            "tokens": pa.array([15, 12, 11], pa.int32()), "text": [c[2] for c in CHUNKS]}),
            path / "chunks.parquet")
    if vectors:
        np.save(path / "chunk_vectors.npy", np.array([c[3] for c in CHUNKS], dtype=np.float32))
    return Build(tmp_path, "b1", {"tables": tables})


def _chunk_rag(tmp_path, llm=None, budget=2048, **build):
    encoder = StubEncoder()
    ctx = EvalContext(ChunkStore(_build(tmp_path, **build), encoder),
                      CountingLLM(llm or NoLLM()), budget=budget, entities="link")
    return baselines.chunk_rag(ctx), encoder


def _line(i: int) -> str:
    return baselines.passage_line(TITLES[CHUNKS[i][1]], CHUNKS[i][2])


def test_chunk_rag_ranks_by_cosine(tmp_path):
    run, encoder = _chunk_rag(tmp_path)
    pred = run(QUESTION)
    assert encoder.passages == []  # the build's vectors, not a second encoding
    assert [c["chunk_id"] for c in pred.details["chunks"]] == ["c2", "c0", "c1"]  # 1, .6, -1
    assert pred.knowledge == _line(2) + _line(0) + _line(1)
    assert _line(1) == "Ermengarde of Tours | Ermengarde of Tours died in 851 at the abbey.\n"
    assert pred.knowledge_tokens == count_tokens(pred.knowledge) and pred.naive_tokens == 0
    assert (pred.answers, pred.status, pred.llm_calls) == ([], "no_reader", 0)
    assert read_scores(pred.answers, QUESTION.answers, pred.knowledge).context_recall == 1.0


def test_chunk_rag_packs_into_the_budget_exactly(tmp_path):
    costs = [count_tokens(_line(i)) for i in (2, 0, 1)]
    total = sum(costs)
    for budget in range(1, total + 3):
        packing = baselines.pack_passages([_line(i) for i in (2, 0, 1)], budget)
        assert packing.tokens == count_tokens(packing.text) <= budget, budget
        whole = sum(1 for n in range(1, 4) if sum(costs[:n]) <= budget)
        assert packing.text.startswith("".join(_line(i) for i in (2, 0, 1)[:whole]))
        if budget in (costs[0], costs[0] + costs[1], total):  # whole lines fill it exactly
            assert (packing.tokens, packing.count, packing.cut) == (budget, whole, False)
    cut = baselines.pack_passages([_line(2), _line(0)], costs[0] + 6)
    assert cut.cut and cut.count == 2 and cut.tokens <= costs[0] + 6
    assert _line(0).startswith(cut.text[len(_line(2)):-1])  # a word prefix of the next line
    assert cut.tokens > costs[0]  # the budget left is used, not wasted
    assert baselines.pack_passages([_line(2)], 1).text == ""  # not even one word fits


def test_chunk_rag_budget_through_the_method(tmp_path):
    budget = count_tokens(_line(2)) + 4
    pred = _chunk_rag(tmp_path, budget=budget)[0](QUESTION)
    assert pred.knowledge_tokens == count_tokens(pred.knowledge) <= budget
    assert pred.details["cut"] and len(pred.details["chunks"]) == 2


def test_chunk_rag_encodes_chunks_without_vectors(tmp_path):
    run, encoder = _chunk_rag(tmp_path, vectors=False)
    assert encoder.passages == [[c[2] for c in CHUNKS]]  # once, at construction
    run(QUESTION), run(QUESTION)
    assert len(encoder.passages) == 1
    assert [c["chunk_id"] for c in run(QUESTION).details["chunks"]] == ["c2", "c0", "c1"]


def test_chunk_rag_refuses_bad_stores(tmp_path):
    with pytest.raises(MethodError, match="chunk-rag needs a store built from documents"):
        _chunk_rag(tmp_path / "a", chunks=False)
    build = _build(tmp_path / "b")
    np.save(build.path / "chunk_vectors.npy", np.zeros((2, 2), dtype=np.float32))
    ctx = EvalContext(ChunkStore(build, StubEncoder()), CountingLLM(NoLLM()), entities="link")
    with pytest.raises(MethodError, match=r"shape \(2, 2\), expected \(3, 2\)"):
        baselines.chunk_rag(ctx)


class Reader:
    """Answers the year in the first knowledge line; records the prompt."""

    name, calls_model, model = "reader", True, "reader-1"

    def __init__(self):
        self.prompts: list[str] = []

    def complete(self, prompt, *, max_tokens, system=""):
        self.prompts.append(prompt)
        return Completion("855", 0, 0, 1.0, self.model, 1)


def test_chunk_rag_one_call_with_the_reader(tmp_path):
    reader = Reader()
    pred = _chunk_rag(tmp_path, llm=reader)[0](QUESTION)
    assert (pred.answers, pred.status, pred.llm_calls) == (["855"], "ok", 1)
    assert pred.knowledge in reader.prompts[0] and pred.prompts[0]["user"] == reader.prompts[0]
    assert pred.prompt_tokens > pred.knowledge_tokens and pred.completion_tokens == 1
    assert read_scores(pred.answers, QUESTION.answers, pred.knowledge).em == 1.0


def test_eval_documents_asks_each_budget_with_that_budget(tmp_path, monkeypatch):
    """bench/eval_documents.py: one reading run per budget, each asking with its own B (the
    methods copy their context per entity mode, so a budget set on the first context after
    the methods were made reached none of them)."""
    from bench import eval_documents
    from lokg.common.datasets import Dataset
    from lokg.evaluation.text_datasets import ReadingSet
    from lokg.runtime.query import Runtime

    rt = DoubleRuntime()
    monkeypatch.setattr(Runtime, "open", classmethod(lambda cls, store: rt))
    args = eval_documents.parse_args(["--dataset", "musique-200", "--work", str(tmp_path),
                                      "--methods", "lokg,lokg-tcr", "--budgets", "256,1024",
                                      "--no-progress"])
    reading = ReadingSet(Dataset("musique", tmp_path / "q.json", "dev", QUESTIONS[:1], "0"), ())
    results = eval_documents.run_budgets(args, reading, tmp_path / "store", "test")
    assert [kw["budget"] for kw in rt.asked] == [256, 256, 1024, 1024]
    assert list(results) == [256, 1024]
