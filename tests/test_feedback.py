"""The feedback log (runtime/feedback.py): append-only segments that concurrent writers and a
SIGKILL mid-append never tear or interleave, rotation under a size cap, and a reader that
skips what is malformed with its reason."""

from __future__ import annotations

import multiprocessing
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest

from lokg.runtime import feedback
from lokg.testing.doubles import route_answer as _answer

ROOT = Path(__file__).resolve().parents[1]


def _record(i: int, **extra) -> dict:
    return {"build_id": "b1", "kind": "chain_stop",
            "missing": [{"entity": f"e{i}", "name": f"Entity {i}", "relation": "capital_of",
                         "text": f"Entity {i} capital of"}], **extra}


def _write_many(directory: str, start: int, count: int) -> None:
    log = feedback.FeedbackLog(directory)
    for i in range(start, start + count):
        assert log.append(_record(i))


def test_a_record_round_trips_and_the_question_is_kept_only_when_configured(tmp_path):
    plain = feedback.FeedbackLog(tmp_path / "a")
    keeping = feedback.FeedbackLog(tmp_path / "b", keep_questions=True)
    assert plain.append(_record(1, question="Which city?"))
    assert keeping.append(_record(1, question="Which city?"))
    (a,), (b,) = (feedback.read_log(tmp_path / d).records for d in ("a", "b"))
    assert "question" not in a and b["question"] == "Which city?"
    assert a["missing"][0]["entity"] == "e1" and a["v"] == feedback.VERSION
    assert a["time"].endswith("Z") and len(a["id"]) == 25


def test_threads_and_processes_never_interleave_records(tmp_path):
    directory = str(tmp_path / "log")
    shared = feedback.FeedbackLog(directory)
    threads = [threading.Thread(target=lambda k=k: [shared.append(_record(k * 1000 + i))
                                                   for i in range(200)]) for k in range(6)]
    procs = [multiprocessing.get_context("spawn").Process(
        target=_write_many, args=(directory, 10_000 * (k + 1), 300)) for k in range(3)]
    for w in (*threads, *procs):
        w.start()
    for w in (*threads, *procs):
        w.join()
    assert all(p.exitcode == 0 for p in procs)
    read = feedback.read_log(directory)
    assert read.skipped == []
    entities = [r["missing"][0]["entity"] for r in read.records]
    assert len(entities) == len(set(entities)) == 6 * 200 + 3 * 300
    assert read.segments == 4  # one per writing process, the threads share theirs


def test_a_forked_child_writes_its_own_segment(tmp_path):
    log = feedback.FeedbackLog(tmp_path)
    assert log.append(_record(0))
    child = multiprocessing.get_context("fork").Process(target=log.append, args=(_record(1),))
    child.start()
    child.join()
    assert log.append(_record(2))
    read = feedback.read_log(tmp_path)
    assert len(read.records) == 3 and read.segments == 2 and read.skipped == []


KILLED_WRITER = """
import sys
from lokg.runtime import feedback
log = feedback.FeedbackLog(sys.argv[1])
big = ["m" * 200] * 250  # ~50 KB records: a kill often lands inside a write
i = 0
print("ready", flush=True)
while True:
    log.append({"build_id": "b", "kind": "no_entity", "missing": [], "mentions": big,
                "question": str(i)})
    i += 1
"""


@pytest.mark.parametrize("delay", [0.05, 0.2, 0.4])
def test_a_writer_killed_mid_append_leaves_nothing_torn_for_the_next(tmp_path, delay):
    proc = subprocess.Popen([sys.executable, "-c", KILLED_WRITER, str(tmp_path)], cwd=ROOT,
                            stdout=subprocess.PIPE)
    assert proc.stdout.readline().strip() == b"ready"
    time.sleep(delay)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert feedback.FeedbackLog(tmp_path).append(_record(7))
    read = feedback.read_log(tmp_path)
    assert read.records[-1]["missing"][0]["entity"] == "e7"  # the next writer is intact
    assert all(len(r["mentions"]) == 250 for r in read.records[:-1])
    # at most the killed writer's last line is lost, and only as "torn"
    assert len(read.skipped) <= 1
    assert all(why.startswith("torn") for _, why in read.skipped)


def test_a_torn_line_and_a_garbage_segment_are_skipped_with_their_reasons(tmp_path):
    log = feedback.FeedbackLog(tmp_path)
    assert log.append(_record(1))
    log.close()
    good = next(tmp_path.glob("*.log"))
    line = feedback.encode({"v": 1})
    with open(good, "ab") as f:
        f.write(line[: len(line) // 2])  # a torn tail
    (tmp_path / "0-x-1-ff.log").write_bytes(b"\x00\xffgarbage\n" + feedback.encode({"v": 9}))
    (tmp_path / "notes.txt").write_text("not a segment")
    assert feedback.FeedbackLog(tmp_path).append(_record(2))
    read = feedback.read_log(tmp_path)
    assert [r["missing"][0]["entity"] for r in read.records] == ["e1", "e2"]
    reasons = dict(read.skipped)
    assert reasons[f"{good.name}:2"].startswith("torn")
    assert reasons["0-x-1-ff.log:1"].startswith("not a record line")
    assert reasons["0-x-1-ff.log:2"].startswith("version 9")


def test_a_flipped_byte_fails_the_checksum(tmp_path):
    log = feedback.FeedbackLog(tmp_path)
    assert log.append(_record(1))
    log.close()
    seg = next(tmp_path.glob("*.log"))
    seg.write_bytes(seg.read_bytes().replace(b"e1", b"e9"))
    read = feedback.read_log(tmp_path)
    assert read.records == [] and read.skipped[0][1] == "checksum mismatch"


def test_segments_rotate_and_the_oldest_go_past_the_cap(tmp_path):
    one = len(feedback.encode({**_record(0), "v": 1, "id": "0" * 25, "time": "x" * 27,
                               "mentions": []}))
    log = feedback.FeedbackLog(tmp_path, segment_bytes=one * 10, max_bytes=one * 35)
    for i in range(100):
        assert log.append(_record(i))
    sizes = feedback.segment_sizes(tmp_path)
    assert all(s <= one * 10 for s in sizes.values())
    assert sum(sizes.values()) <= one * 35 + one * 10
    kept = [int(r["missing"][0]["entity"][1:]) for r in feedback.read_log(tmp_path).records]
    assert kept == list(range(100 - len(kept), 100)) and 30 <= len(kept) < 100  # newest kept


def test_a_writer_whose_segment_was_rotated_away_opens_a_new_one(tmp_path):
    log = feedback.FeedbackLog(tmp_path)
    assert log.append(_record(1))
    for seg in tmp_path.glob("*.log"):
        seg.unlink()
    assert log.append(_record(2))
    assert [r["missing"][0]["entity"] for r in feedback.read_log(tmp_path).records] == ["e2"]


def test_an_append_that_cannot_be_written_returns_false_and_counts(tmp_path, caplog):
    (tmp_path / "file").write_text("")
    log = feedback.FeedbackLog(tmp_path / "file" / "log")
    assert log.append(_record(1)) is False
    assert log.append({"kind": "bogus"}) is False  # not a record: refused, still no raise
    assert (log.appended, log.failed) == (0, 2)
    assert "append failed" in caplog.text


def test_bad_sizes_are_refused_at_construction(tmp_path):
    with pytest.raises(ValueError, match="segment_bytes"):
        feedback.FeedbackLog(tmp_path, segment_bytes=100, max_bytes=10)


def test_stats_count_kinds_relations_and_builds(tmp_path):
    log = feedback.FeedbackLog(tmp_path)
    for i in range(3):
        log.append(_record(i))
    log.append({"build_id": "b2", "kind": "no_entity", "missing": [], "mentions": ["Zed"]})
    s = feedback.stats(feedback.read_log(tmp_path))
    assert s["records"] == 4 and s["by_kind"] == {"chain_stop": 3, "no_entity": 1,
                                                   "no_derivation": 0}
    assert s["top_relations"] == [{"relation": "capital_of", "count": 3}]
    assert s["builds"] == ["b1", "b2"] and s["missing_facts"] == 3


def test_the_log_lives_beside_the_builds(tmp_path):
    assert feedback.log_dir(tmp_path) == tmp_path / "feedback" / "log"
    assert os.path.commonpath([feedback.log_dir(tmp_path), tmp_path / "builds"]) == str(tmp_path)


# ------------------------------------------------------------------ what the runtime records

def _log(store: Path) -> list[dict]:
    read = feedback.read_log(feedback.log_dir(store))
    assert read.skipped == []
    return read.records


def test_a_chain_that_stops_logs_the_missing_fact_and_the_route_says_where(gap_store):
    from lokg.runtime.query import Runtime

    rt = Runtime.open(gap_store)
    a = rt.ask("what is the job of edda quist 's wife ?", policy="route")
    assert a.route["derivable"] is False
    assert a.route["stopped"] == {"chain": ["spouse", "profession"], "at": 2, "hop": "profession",
                                  "from": [{"key": "e5", "name": "fabio quist"}],
                                  "from_count": 1}
    (record,) = _log(gap_store)
    assert record["kind"] == "chain_stop" and record["build_id"] == rt.build_id
    assert record["missing"] == [{"entity": "e5", "name": "fabio quist",
                                  "relation": "profession", "text": "fabio quist profession"}]
    assert record["mentions"] == ["edda quist"]  # the topic, for enrichment's entity passages
    assert "question" not in record  # kept only when configured
    rt.ask("what is the job of greta quist 's wife ?", policy="route")  # derived: nothing missing
    assert len(_log(gap_store)) == 1


def test_no_link_logs_the_mentions_and_the_question_only_when_kept(gap_store, tmp_path):
    from lokg.runtime.query import Runtime

    rt = Runtime.open(gap_store, feedback_dir=str(tmp_path), feedback_questions=True)
    assert rt.ask("Who founded Zebulon Works in 1901?").status == "no_entity"
    (record,) = feedback.read_log(tmp_path).records
    assert record["kind"] == "no_entity" and record["mentions"] == ["Zebulon Works", "1901"]
    assert record["question"] == "Who founded Zebulon Works in 1901?"


def test_feedback_off_writes_nothing_and_a_broken_log_never_fails_a_query(gap_store, tmp_path):
    from lokg.runtime.query import Runtime

    off = Runtime.open(gap_store, feedback=False, feedback_dir=str(tmp_path / "off"))
    assert off.feedback is None and off.ask("Who founded Zebulon Works?").status == "no_entity"
    assert not (tmp_path / "off").exists()
    (tmp_path / "file").write_text("")
    broken = Runtime.open(gap_store, feedback_dir=str(tmp_path / "file" / "log"))
    assert broken.ask("what is the job of edda quist 's wife ?", policy="route").route["stopped"]
    assert broken.feedback.failed == 1


def test_feedback_list_and_stats_read_the_log_and_report_what_they_skip(tmp_path):
    import json

    from click.testing import CliRunner

    from lokg.runtime.cli import cli

    directory = feedback.log_dir(tmp_path)
    log = feedback.FeedbackLog(directory)
    for i in range(3):
        log.append(_record(i))
    log.append({"build_id": "b2", "kind": "no_entity", "missing": [], "mentions": ["Zed"]})
    (directory / "0-0-x-1-ff.log").write_bytes(b"garbage\n")
    runner = CliRunner()
    listed = runner.invoke(cli, ["feedback", "list", "--store", str(tmp_path), "--limit", "2"])
    assert listed.exit_code == 0, listed.output
    lines = [line for line in listed.stdout.splitlines()]
    assert len(lines) == 2 and "Entity 2 capital of" in lines[0]
    assert "no_entity" in lines[1] and "mention: Zed" in lines[1]
    assert "skipped 0-0-x-1-ff.log:1: not a record line" in listed.stderr
    only = runner.invoke(cli, ["feedback", "list", "--dir", str(directory), "--json",
                               "--kind", "chain_stop", "--limit", "0"])
    assert [json.loads(x)["missing"][0]["entity"] for x in only.stdout.splitlines()] == \
        ["e0", "e1", "e2"]
    stats = json.loads(runner.invoke(cli, ["feedback", "stats", "--store", str(tmp_path)]).stdout)
    assert stats["records"] == 4 and stats["skipped"] == 1 and stats["builds"] == ["b1", "b2"]


def test_a_hop_is_missing_only_for_entities_of_the_types_it_starts_from():
    from lokg.runtime.relknow import Facts, HopDomains, inverse_hop

    # people 0-2 have a profession (relation 0: person -> job 3); 4 is a person without one;
    # 5 is a college: a profession is no gap there; 6 has no types (nothing to tell: a gap)
    types = {0: ["person"], 1: ["person"], 2: ["person"], 3: ["job"], 4: ["person"],
             5: ["college"], 6: []}
    facts = Facts([0, 1, 2], [0, 0, 0], [3, 3, 3], n_relations=1)
    domains = HopDomains(facts, lambda e: types[e])
    assert facts.subjects(0).tolist() == [0, 1, 2] and facts.subjects(1).tolist() == [3]
    assert domains.fits(4, 0) and not domains.fits(5, 0) and domains.fits(6, 0)
    assert domains.fits(3, inverse_hop(0, 1)) and not domains.fits(4, inverse_hop(0, 1))


# ------------------------------------------------------------------ bridge entities

def test_the_bridge_a_delta_supplied_is_named_in_the_next_rounds_record():
    """A 2-hop question: round 0 reaches nothing past the topic; the round-1 delta adds
    "Decade by Neil Young", so round 1's answer reaches Neil Young — whose sibling is the
    answer. The record must name Neil Young, or the refresh only ever asks about Decade."""
    before = feedback.missing_record(_answer([], []), 3)
    assert before["kind"] == "no_derivation" and before["mentions"] == ["Decade"]
    assert before["bridges"] == []
    after = feedback.missing_record(_answer(["Neil Young"], ["Neil Young", "decade ", "Crazy Horse",
                                                             "Reprise", "Harvest"]), 3)
    assert after["bridges"] == [{"name": n, "text": n}
                                for n in ("Neil Young", "Crazy Horse", "Reprise")]  # not the topic
    assert feedback.missing_record(_answer(["Neil Young"], []), 0)["bridges"] == []
    stop = {"chain": ["performer", "sibling"], "hop": "sibling",
            "from": [{"key": "neil young", "name": "Neil Young"}]}
    stopped = feedback.missing_record(_answer(["Neil Young"], ["Crazy Horse"], stopped=stop), 3)
    assert stopped["kind"] == "chain_stop" and stopped["missing"][0]["name"] == "Neil Young"
    assert stopped["bridges"] == [{"name": "Crazy Horse", "text": "Crazy Horse"}]  # not twice
    assert feedback.record_problem({**after, "v": 1, "id": "x", "time": "t"}) is None


def test_a_record_names_the_passages_nearest_its_question_without_keeping_the_question():
    """The hop no linked path reaches is in a passage the question's words find; the record
    names those chunks (the refresh extracts them), not the question."""
    asked = []

    def nearest(question):
        asked.append(question)
        return ["c7", "c2"]

    record = feedback.missing_record(_answer([], []), 3, nearest)
    assert record["passages"] == ["c7", "c2"] and asked == [_answer([], []).question]
    assert "passages" not in feedback.missing_record(_answer([], []), 3)
    log = feedback.FeedbackLog(Path("/nonexistent-unused"), passages=nearest)
    assert log.passages is nearest
    good = {**record, "v": 1, "id": "x", "time": "t"}
    assert feedback.record_problem(good) is None
    assert feedback.record_problem({**good, "passages": [7]}).startswith("field 'passages'")


def test_a_malformed_bridge_list_is_not_a_record():
    good = {"v": 1, "id": "x", "time": "t", "build_id": "b", "kind": "no_derivation",
            "missing": [], "mentions": []}
    assert feedback.record_problem({**good, "bridges": [{"name": "A"}]}).startswith("field 'bridges'")
    assert feedback.record_problem({**good, "bridges": "A"}).startswith("field 'bridges'")


def test_the_runtime_logs_the_entities_its_answer_reached(gap_store, tmp_path):
    from lokg.runtime.query import Runtime

    rt = Runtime.open(gap_store, feedback_dir=str(tmp_path), feedback_bridges=2)
    a = rt.ask("what is the job of edda quist 's wife ?", policy="route")
    (record,) = feedback.read_log(tmp_path).records
    stop = [e["name"] for e in a.route["stopped"]["from"]]  # named as the missing fact
    reached = [n for n in dict.fromkeys([*a.answers, *(c["name"] for c in a.candidates)])
               if n not in ("edda quist", *stop)]
    assert reached and record["bridges"] == [{"name": n, "text": n} for n in reached[:2]]


def test_feedback_entities_are_the_ends_only_feedback_triples_have():
    """Africa (1) is in the dump's triples; continent (2) only in a delta's, so only it is
    feedback's; a delta triple some passage of the dump states too is not feedback's alone."""
    import pyarrow as pa

    from lokg.runtime.feedback import feedback_entities

    lineage = {"s": [1, 3], "r": [0, 0], "o": [2, 4], "chunk_id": ["c9", "c9"],
               "sentence_id": ["s9", "s9"]}
    sources = {"s": [0, 1, 3, 3], "r": [1, 0, 0, 0], "o": [1, 2, 4, 4],
               "chunk_id": ["c1", "c9", "c9", "c2"], "sentence_id": ["s1", "s9", "s9", "s2"]}
    tables = {"feedback_lineage": pa.table(lineage), "triple_sources": pa.table(sources),
              "triples": pa.table({"s": [0, 1, 3], "r": [1, 0, 0], "o": [1, 2, 4]})}

    class Build:
        manifest = {"tables": {name: {"rows": t.num_rows} for name, t in tables.items()}}

        @staticmethod
        def read(name, columns=None):
            return tables[name].select(columns) if columns else tables[name]

    read = []
    assert feedback_entities(Build, lambda: read.append(1) or tables["triples"]) == {2}
    Build.manifest = {"tables": {"feedback_lineage": {"rows": 0}}}
    assert feedback_entities(Build, lambda: read.append(2)) == frozenset() and read == [1]


def test_a_record_lists_the_names_the_question_wrote_that_nothing_linked():
    """The Aschenbrodel question linked only "country" and "composer"; the Durant question's
    link of "state" does not cover "Golden State"; a vector link covers no name."""
    from lokg.runtime.answer_record import Answer

    def answer(question, *links):
        return replace(Answer.empty("ok", "", {}, budget=10, question=question, llm={},
                                    build_id="b1", retrieval="taimr", policy="route",
                                    linked=[{"name": s, "key": s, "span": s, "method": m}
                                            for s, m in links]),
                       route={"predictor": "zero-shot", "derivable": False, "stopped": None})

    q = "Who was in charge of the country where the composer of Aschenbrodel was a citizen?"
    record = feedback.missing_record(answer(q, ("country", "exact"), ("composer", "exact")), 0)
    assert record["unlinked"] == ["Aschenbrodel"]
    q = "What river flows through the city Kevin Durant played for before Golden State?"
    assert feedback.missing_record(answer(q, ("kevin durant", "exact"), ("state", "exact")),
                                   0)["unlinked"] == ["Golden State"]
    assert feedback.missing_record(answer(q, (q, "vector")), 0)["unlinked"] == \
        ["Kevin Durant", "Golden State"]
    assert feedback.record_problem({**record, "v": 1, "id": "x", "time": "t"}) is None
    assert feedback.record_problem({**record, "v": 1, "id": "x", "time": "t",
                                    "unlinked": "Aschenbrodel"}).startswith("field 'unlinked'")


def test_the_logged_passages_reuse_the_vector_the_query_embedded_for_its_question():
    """An append after ``ask`` costs no encoder forward when the query embedded its question;
    another question, or the same one on another thread (a server worker's own query), is
    embedded for itself."""
    import threading
    from types import SimpleNamespace

    import numpy as np

    from lokg.runtime.query import Runtime

    encoded = []

    class Encoder:
        @staticmethod
        def encode_queries(texts):
            encoded.extend(texts)
            return np.array([[float(len(t)), 1.0] for t in texts])

    nearest = []
    rt = object.__new__(Runtime)
    rt._encoder, rt._encoder_error, rt._asked = Encoder(), None, threading.local()
    rt.provenance = SimpleNamespace(chunk_vectors=np.eye(2), nearest_chunks=lambda v, n: (
        nearest.append(v.tolist()) or ["c1"][:n]))
    masked, plain = rt.embed("who is [X] ?", "who is Ada ?")  # the query's one encoder batch
    assert encoded == ["who is [X] ?", "who is Ada ?"]
    assert rt.question_passages("who is Ada ?", 1) == ["c1"]
    assert encoded == ["who is [X] ?", "who is Ada ?"] and nearest == [plain.tolist()]
    assert rt.question_passages("who is Bea ?", 1) == ["c1"]
    assert encoded[-1] == "who is Bea ?"
    worker = threading.Thread(target=rt.question_passages, args=("who is Ada ?", 1))
    worker.start()
    worker.join()
    assert encoded[-1] == "who is Ada ?" and len(encoded) == 4


def test_feedback_list_shows_a_missing_fact_without_text(tmp_path):
    """Issue 51 D7: ``text`` of a missing fact is optional; ``feedback list`` crashed on it."""
    from click.testing import CliRunner

    from lokg.runtime.cli import cli

    log = feedback.FeedbackLog(feedback.log_dir(tmp_path))
    assert log.append({"build_id": "b1", "kind": "chain_stop",
                       "missing": [{"entity": "e1", "name": "Paris", "relation": "capital_of"},
                                   {"entity": "e2", "relation": "~born_in"}]})
    listed = CliRunner().invoke(cli, ["feedback", "list", "--store", str(tmp_path)])
    assert listed.exit_code == 0, listed.output
    assert "Paris capital_of; e2 ~born_in" in listed.stdout


def test_a_record_with_a_lone_surrogate_is_skipped_and_counted(tmp_path):
    """Issue 51 D3: a valid-checksum record whose mention is "\\ud800" reached the tokenizer
    and failed every refresh build; the reader skips it with its reason, the others stay."""
    from lokg.text.feedback_questions import alias_questions, sub_questions

    bad = {"v": 1, "id": "0" * 25, "time": "2026-01-01T00:00:00.000000Z", "build_id": "b1",
           "kind": "no_entity", "missing": [], "mentions": ["\ud800"], "unlinked": ["\udfff x"]}
    (tmp_path / "0-0-x-1-ff.log").write_bytes(feedback.encode(bad))
    assert feedback.FeedbackLog(tmp_path).append(_record(1))
    read = feedback.read_log(tmp_path)
    assert [r["missing"][0]["entity"] for r in read.records] == ["e1"]
    assert read.skipped == [("0-0-x-1-ff.log:1",
                             "a string that is not UTF-8 text (a lone surrogate)")]
    for sq in sub_questions(read.records) + alias_questions(read.records):
        sq.text.encode("utf-8")
    assert feedback.stats(read)["skipped"] == 1
