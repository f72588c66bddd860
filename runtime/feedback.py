"""The feedback log: what questions found missing, appended beside the builds.

Every process writes its own segment files (``<dir>/<ms>-<seq>-<host>-<pid>-<random>.log``), so
writers never share a file and cannot interleave; the threads of one process share its segment
under a lock. A record is one line ``<crc32 hex> <JSON>\\n`` written by one ``os.write`` on an
``O_APPEND`` descriptor: a process killed mid-append leaves at most one torn last line in its
own segment, which the reader skips (bad checksum or no newline) and no later record touches,
because the next process opens a new segment. A short write closes the segment for the same
reason. Segments rotate at ``segment_bytes``; past ``max_bytes`` in all the oldest segments
are deleted (a writer whose segment was deleted under it notices and opens a new one).

Appending never raises and never waits on the disk (no fsync): a failure is counted and logged
once, and the query goes on. Question text is kept only when the log is told to keep it.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import socket
import threading
import time
import zlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

log = logging.getLogger(__name__)

VERSION = 1
KINDS = ("chain_stop", "no_entity", "no_derivation")
SUFFIX = ".log"
#: A record longer than this is not written (a runaway question or mention list).
MAX_RECORD_BYTES = 64 * 1024


#: Missing facts one record lists at most (the entities a chain's walk stopped at).
MAX_MISSING = 10
#: The relation joining a question's linked name to the topic of a passage nearest the
#: question (text/feedback_enrich.py writes it): the path to a hop the passage states and
#: nothing in the graph joins to the name. The runtime ranks paths through it apart from facts.
BRIDGE = "asked with"


def log_dir(store_root: str | Path) -> Path:
    """Where a local store's feedback log lives: beside ``builds/``, never inside a build."""
    return Path(store_root) / "feedback" / "log"


def new_id() -> str:
    """A record id that sorts by time (13 hex digits of milliseconds, then 12 random)."""
    return f"{time.time_ns() // 1_000_000:013x}{secrets.token_hex(6)}"


def now() -> str:
    """The log's time stamp: UTC ISO 8601 to the microsecond, "Z" (sorts as text; two
    writers' records within one millisecond still read back in the order they were written)."""
    return datetime.now(timezone.utc).isoformat(timespec="microseconds").replace("+00:00", "Z")


def encode(record: Mapping) -> bytes:
    """One record as its log line: checksum, space, compact JSON (ASCII), newline."""
    payload = json.dumps(record, ensure_ascii=True, separators=(",", ":"), sort_keys=True)
    return f"{zlib.crc32(payload.encode('ascii')):08x} {payload}\n".encode("ascii")


def record_problem(record) -> str | None:
    """Why a decoded record is not a feedback record (None when it is one)."""
    if not isinstance(record, dict):
        return "not a JSON object"
    if record.get("v") != VERSION:
        return f"version {record.get('v')!r} (this reader knows {VERSION})"
    for key, kind in (("id", str), ("time", str), ("build_id", str), ("kind", str),
                      ("missing", list), ("mentions", list)):
        if not isinstance(record.get(key), kind):
            return f"field '{key}' missing or not a {kind.__name__}"
    if not _utf8(record):
        return "a string that is not UTF-8 text (a lone surrogate)"
    if record["kind"] not in KINDS:
        return f"kind {record['kind']!r} (known: {', '.join(KINDS)})"
    if not all(isinstance(m, dict) and isinstance(m.get("entity"), str)
               and isinstance(m.get("relation"), str) for m in record["missing"]):
        return "a missing fact without a string 'entity' and 'relation'"
    for key in ("unlinked", "passages"):
        value = record.get(key, [])
        if not isinstance(value, list) or not all(isinstance(n, str) for n in value):
            return f"field '{key}' not a list of strings"
    named = record.get("bridges", [])
    if not isinstance(named, list) or not all(
            isinstance(b, dict) and isinstance(b.get("name"), str) and isinstance(b.get("text"), str)
            for b in named):
        return "field 'bridges' not a list of entities with a string 'name' and 'text'"
    return None


def _utf8(record: dict) -> bool:
    """Whether every string of ``record`` is text UTF-8 can write: JSON's ``\\ud800`` escape
    decodes to a lone surrogate, which a tokenizer or a Parquet writer refuses."""
    try:
        json.dumps(record, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def decode(line: bytes) -> tuple[dict | None, str]:
    """A log line back to its record, or None and why it was skipped."""
    if not line.endswith(b"\n"):
        return None, "torn (no newline: a writer stopped mid-append)"
    head, _, payload = line[:-1].partition(b" ")
    try:
        if int(head, 16) != zlib.crc32(payload) or len(head) != 8:
            return None, "checksum mismatch"
        record = json.loads(payload)
    except ValueError as exc:
        return None, f"not a record line ({exc.__class__.__name__})"
    problem = record_problem(record)
    return (None, problem) if problem else (record, "")


def missing_record(answer, bridges: int | None = None,
                   passages: Callable[[str], list[str]] | None = None) -> dict | None:
    """What an :class:`~runtime.answer_record.Answer` says the graph lacks, as a record to log: the
    facts where the predicted chain's walk stopped (e, r_k, ?) with the linked names, or —
    nothing linked, nothing derived — the question's topic mentions; None when nothing is
    missing. A record past linking also names up to ``bridges`` (setting
    ``query.feedback_bridges``) entities the answer reached: the next hop of a multi-hop
    question starts there, and no chain stop names it. Every record lists the names the
    question writes that nothing linked (``unlinked``): the graph may hold the entity under
    another form ("Aschenbrödel", "Friedrich Hayek"), which enrichment gives that alias.
    ``passages(question)``: the chunks nearest the question, which a record names
    (``passages``) so that enrichment extracts them about the question's names — the passage
    of a hop no path from the links reaches, found by the question's words, not kept."""
    record = _missing(answer, bridges)
    if record is not None and passages is not None:
        record["passages"] = list(passages(answer.question))
    return record


def _missing(answer, bridges: int | None) -> dict | None:
    from lokg.runtime.linker import name_mentions, unlinked_names

    route = answer.route or {}
    spans = [str(link.get("span", "")) for link in answer.linked  # a vector link's: the
             if link.get("method") != "vector"]                     # whole question
    base = {"build_id": answer.build_id, "question": answer.question, "missing": [],
            "mentions": [], "unlinked": unlinked_names(answer.question, spans)}
    if answer.status == "no_entity":
        return {**base, "kind": "no_entity", "mentions": name_mentions(answer.question)}
    stopped = route.get("stopped")
    if stopped:  # the fact, and its topic: what enrichment tries when the relation is a guess
        return {**base, "kind": "chain_stop", "chain": stopped["chain"],
                "missing": [missing_fact(e, stopped["hop"]) for e in stopped["from"]],
                "mentions": [link["name"] for link in answer.linked],
                "bridges": bridge_facts(answer, _bridges(bridges),
                                        [e["name"] for e in stopped["from"]])}
    if answer.status == "no_paths" or (route.get("predictor") and not route.get("derivable")):
        return {**base, "kind": "no_derivation",
                "mentions": [link["name"] for link in answer.linked],
                "bridges": bridge_facts(answer, _bridges(bridges))}
    return None


def _bridges(bridges: int | None) -> int:
    if bridges is None:
        from lokg.runtime.query_settings import QuerySettings

        bridges = QuerySettings().feedback_bridges
    return int(bridges)


def bridge_facts(answer, limit: int, named: Iterable[str] = ()) -> list[dict]:
    """The entities the answer reached (its answers, then its best candidates) that are not
    the linked topic nor already ``named`` (a chain stop's entities), as sub-questions about
    the entity: "what does the graph lack about the bridge", retrieved by its name. Without
    them a refresh only ever asks about the topic — the first hop — and the answer a delta
    moved onto a bridge entity is never followed."""
    from lokg.runtime.linker import folded

    topic = {folded(str(n)) for n in (*(link["name"] for link in answer.linked), *named)}
    out: dict[str, dict] = {}
    for name in [*answer.answers, *(c["name"] for c in answer.candidates)]:
        key = folded(str(name))
        if len(out) >= limit:
            break
        if key and key not in topic and key not in out:
            out[key] = {"name": name, "text": name}
    return list(out.values())



def feedback_entities(build, triples) -> frozenset[int]:
    """Entities only query-driven feedback put in ``build``'s graph: ends of triples whose
    every source is a feedback delta's (``feedback_lineage``) that no other triple has.
    ``triples``: a callable giving the build's triples table, read only when there is lineage;
    a store opens with this, so only the triples touching those ends are looked at in Python."""
    if not build.manifest.get("tables", {}).get("feedback_lineage", {}).get("rows"):
        return frozenset()
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    from lokg.runtime.contract import to_numpy

    columns = ["s", "r", "o", "chunk_id", "sentence_id"]
    lineage = build.read("feedback_lineage", columns=columns)
    fed = set(zip(*(lineage[c].to_pylist() for c in columns)))
    sources = build.read("triple_sources", columns=columns)
    sources = sources.filter(pc.is_in(sources["s"], pa.array({row[0] for row in fed},
                                                             type=sources["s"].type)))
    stated = {row[:3] for row in zip(*(sources[c].to_pylist() for c in columns))
              if row not in fed}
    only = {row[:3] for row in fed} - stated
    ends = {e for s, _, o in only for e in (s, o)}
    if not ends:
        return frozenset()
    table = triples()
    s, r, o = (to_numpy(table.column(c)) for c in "sro")
    candidates = np.fromiter(ends, dtype=np.int64, count=len(ends))
    others = set()
    for i in np.flatnonzero(np.isin(s, candidates) | np.isin(o, candidates)):
        if (int(s[i]), int(r[i]), int(o[i])) not in only:
            others.update((int(s[i]), int(o[i])))
    return frozenset(ends - others)


def missing_fact(entity: Mapping, hop: str) -> dict:
    """One sub-question (e, r, ?) — or (?, r, e) for a hop walked backwards (``~r``) — with
    its words, the form a passage retriever searches for."""
    from lokg.runtime.question_text import relation_text
    from lokg.runtime.relknow import split_hop

    relation, backwards = split_hop(hop)
    words = relation_text(relation)
    text = f"{words} {entity['name']}" if backwards else f"{entity['name']} {words}"
    return {"entity": entity["key"], "name": entity["name"], "relation": hop, "text": text}


def fact_text(fact: Mapping) -> str:
    """A missing fact's words for a listing: its ``text`` (optional in a record), else its
    name (or entity) and relation."""
    text = fact.get("text")
    if isinstance(text, str) and text:
        return text
    return f"{fact.get('name') or fact['entity']} {fact['relation']}"


class FeedbackLog:
    """This process's appender to the log in ``directory`` (created on first append)."""

    def __init__(self, directory: str | Path, *, keep_questions: bool = False,
                 segment_bytes: int = 16 << 20, max_bytes: int = 256 << 20,
                 bridges: int | None = None, identify=None,
                 passages: Callable[[str], list[str]] | None = None):
        if segment_bytes < 1 or max_bytes < segment_bytes:
            raise ValueError(f"feedback log: need 1 <= segment_bytes ({segment_bytes}) <= "
                             f"max_bytes ({max_bytes})")
        self.directory = Path(directory)
        self.keep_questions = keep_questions
        # bridge entities a record names; the LLM that lists the missing facts (None: none)
        self.bridges, self.identify = _bridges(bridges), identify
        self.passages = passages  # question -> the chunk ids a record names (None: none)
        self.segment_bytes, self.max_bytes = segment_bytes, max_bytes
        self.appended = self.failed = 0
        self._lock = threading.Lock()
        self._fd: int | None = None
        self._pid = self._size = self._seq = 0
        self._name = ""

    def append(self, record: Mapping) -> bool:
        """Add one record (id, time and version filled in); False when it could not be."""
        try:
            full = {"v": VERSION, "id": new_id(), "time": now(), "mentions": [], **record}
            if not self.keep_questions:
                full.pop("question", None)
            problem = record_problem(full)
            if problem:
                raise ValueError(f"not a feedback record: {problem}")
            line = encode(full)
            if len(line) > MAX_RECORD_BYTES:
                raise ValueError(f"record of {len(line)} bytes > {MAX_RECORD_BYTES}")
            with self._lock:
                self._write(line)
            self.appended += 1
            return True
        except Exception as exc:  # noqa: BLE001 - a query never fails because of its feedback
            self.failed += 1
            if self.failed == 1 or self.failed % 1000 == 0:
                log.warning("feedback log %s: append failed (%d so far): %s",
                            self.directory, self.failed, exc)
            return False

    def append_missing(self, answer) -> bool:
        """Log what ``answer`` found missing (nothing when nothing is; with ``identify``, the
        LLM's sub-questions in place of the bridges, runtime/feedback_llm.py); never raises."""
        try:
            record = missing_record(answer, self.bridges, self.passages)
            if record is not None and self.identify is not None:
                from lokg.runtime.feedback_llm import identified

                record = identified(record, answer, self.identify)
        except Exception as exc:  # noqa: BLE001 - as append: the query goes on
            self.failed += 1
            log.warning("feedback log %s: no record for an answer: %s", self.directory, exc)
            return False
        return record is None or self.append(record)

    def _write(self, line: bytes) -> None:
        fd = self._segment(len(line))
        written = os.write(fd, line)
        self._size += written
        if written != len(line):  # the torn line stays last in a segment nobody reopens
            self._close()
            raise OSError(f"short write ({written} of {len(line)} bytes)")

    def _segment(self, incoming: int) -> int:
        """The open segment, or a new one after a fork, a rotation or a deletion under us."""
        fd = self._fd
        if fd is not None and (self._pid != os.getpid() or os.fstat(fd).st_nlink == 0
                               or self._size + incoming > self.segment_bytes):
            self._close()
            fd = None
        if fd is None:
            self.directory.mkdir(parents=True, exist_ok=True)
            self._seq += 1  # orders this writer's segments opened within one millisecond
            name = (f"{time.time_ns() // 1_000_000:013x}-{self._seq:06x}-{socket.gethostname()}-"
                    f"{os.getpid()}-{secrets.token_hex(4)}{SUFFIX}")
            fd = os.open(self.directory / name, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            self._fd, self._pid, self._size, self._name = fd, os.getpid(), 0, name
            self._retain()
        return fd

    def _retain(self) -> None:
        """Delete the oldest segments (not this one) while all of them exceed ``max_bytes``."""
        sizes = segment_sizes(self.directory)
        total = sum(sizes.values())
        for name in sorted(sizes):
            if total <= self.max_bytes:
                break
            if name != self._name:
                (self.directory / name).unlink(missing_ok=True)
                total -= sizes[name]

    def _close(self) -> None:
        if self._fd is not None and self._pid == os.getpid():
            os.close(self._fd)
        self._fd = None

    def close(self) -> None:
        with self._lock:
            self._close()


def segment_sizes(directory: str | Path) -> dict[str, int]:
    """Segment name → bytes, for the segments in ``directory`` (none when it does not exist)."""
    out = {}
    try:
        entries = list(os.scandir(directory))
    except FileNotFoundError:
        return out
    for entry in entries:
        if entry.name.endswith(SUFFIX) and entry.is_file():
            try:
                out[entry.name] = entry.stat().st_size
            except FileNotFoundError:  # rotated away between the listing and the stat
                continue
    return out


@dataclass
class FeedbackRead:
    """The log's valid records (oldest first) and every line or segment skipped, and why."""

    records: list[dict] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (segment[:line], reason)
    segments: int = 0


def read_log(directory: str | Path) -> FeedbackRead:
    """Every record of the log, skipping (with the reason) what is torn or malformed."""
    out = FeedbackRead()
    for name in sorted(segment_sizes(directory)):
        try:
            data = (Path(directory) / name).read_bytes()
        except OSError as exc:
            out.skipped.append((name, f"unreadable: {exc}"))
            continue
        out.segments += 1
        for number, line in enumerate(data.splitlines(keepends=True), start=1):
            record, why = decode(line)
            if record is None:
                out.skipped.append((f"{name}:{number}", why))
            else:
                out.records.append(record)
    out.records.sort(key=lambda r: r["time"])  # stable: a segment's own order within a µs
    return out


def stats(read: FeedbackRead, kinds: Iterable[str] = KINDS) -> dict:
    """Counts for ``lokg feedback stats``: records by kind, sub-questions, top relations."""
    by_kind = dict.fromkeys(kinds, 0)
    relations: dict[str, int] = {}
    builds: set[str] = set()
    for r in read.records:
        by_kind[r["kind"]] = by_kind.get(r["kind"], 0) + 1
        builds.add(r["build_id"])
        for m in r["missing"]:
            relations[m["relation"]] = relations.get(m["relation"], 0) + 1
    top = sorted(relations.items(), key=lambda kv: (-kv[1], kv[0]))[:10]
    return {"records": len(read.records), "segments": read.segments,
            "skipped": len(read.skipped), "by_kind": by_kind,
            "missing_facts": sum(relations.values()), "builds": sorted(builds),
            "bridges": sum(len(r.get("bridges", ())) for r in read.records),
            "identified_by_llm": sum(r.get("identified_by") == "llm" for r in read.records),
            "top_relations": [{"relation": k, "count": v} for k, v in top],
            "first": read.records[0]["time"] if read.records else None,
            "last": read.records[-1]["time"] if read.records else None}
