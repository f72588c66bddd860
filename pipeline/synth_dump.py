"""Writing a synthetic dump's files: kg.nt(.gz) and kg.tsv subject block by subject block (with
malformed lines at stratified positions), and the text files, each with its sha256.

Malformed lines (``MALFORMED_KINDS``) are placed before well-formed line ⌊(i + u_i)·W/M⌋; each
breaks the grammar even for a parser that accepts ``<>`` (the empty-IRI kind also lacks the
final " .").
"""

from __future__ import annotations

import gzip as _gzip
import hashlib
import json
from pathlib import Path

import numpy as np

from lokg.pipeline.synth_questions import question_splits
from lokg.pipeline.synth_random import stream_id, uniform
from lokg.pipeline.synth_schema import CHUNK, NS
from lokg.pipeline.synth_world import World

#: The malformed line kinds, in the order their index is drawn.
MALFORMED_KINDS = ("missing_dot", "truncated_iri", "two_terms", "unterminated_literal",
                   "garbage", "empty_iri")
class _Malformed:
    """M malformed lines at stratified positions: line i goes before well-formed line q_i,
    q_i = floor((i + u_i) · W / M), so they spread evenly and each is placed exactly once."""

    def __init__(self, world: World, names: dict[str, str], n_wellformed: int, rate: float):
        self.world, self.names, self.w = world, names, n_wellformed
        self.m = int(round(rate * n_wellformed))
        self.stream = stream_id(world.seed, "malformed")
        self.text_stream = stream_id(world.seed, "malformed-text")

    def between(self, g0: int, g1: int) -> tuple[np.ndarray, np.ndarray]:
        """(malformed ids, positions) placed before well-formed lines g0..g1-1."""
        if self.m == 0:
            return np.empty(0, np.int64), np.empty(0, np.int64)
        i = np.arange(max(0, g0 * self.m // self.w - 1), min(self.m, g1 * self.m // self.w + 2))
        q = np.minimum(((i + uniform(self.stream, i)) * (self.w / self.m)).astype(np.int64),
                       self.w - 1)
        keep = (q >= g0) & (q < g1)
        return i[keep], q[keep]

    def line(self, i: int) -> bytes:
        """Malformed line i: every kind breaks the N-Triples grammar, whatever IRI rules apply."""
        u = uniform(self.text_stream, np.arange(4 * i, 4 * i + 4))
        w = self.world
        s = w.mid(int(u[1] * w.n_entities))
        o = w.mid(int(u[2] * w.n_entities))
        families = w.families
        rel = self.names[families[int(u[3] * len(families))].base]
        kind = MALFORMED_KINDS[int(u[0] * len(MALFORMED_KINDS))]
        text = {
            "missing_dot": f"<{NS}{s}> <{NS}{rel}> <{NS}{o}>",
            "truncated_iri": f"<{NS}{s}> <{NS}{rel}> <{NS}{o[:5]}",
            "two_terms": f"<{NS}{s}> <{NS}{rel}> .",
            "unterminated_literal": f'<{NS}{s}> <{NS}type.object.name> "Unterminated {s}@en .',
            "garbage": f"%% garbage {s} ;; not a triple {int(u[2] * 1e9)} !!",
            "empty_iri": f"<> <{NS}{rel}> <{NS}{o}>",  # also lacks the final " ."
        }[kind]
        return (text + "\n").encode()

    def write(self, out, chunk: bytes, g0: int, n_lines: int) -> None:
        ids, pos = self.between(g0, g0 + n_lines)
        if len(ids) == 0:
            out.write(chunk)
            return
        line_ends = np.flatnonzero(np.frombuffer(chunk, dtype=np.uint8) == 10) + 1
        starts = np.concatenate([[0], line_ends[:-1]])
        view, cut0 = memoryview(chunk), 0
        for i, q in zip(ids.tolist(), pos.tolist()):
            cut = int(starts[q - g0])
            out.write(view[cut0:cut])
            out.write(self.line(i))
            cut0 = cut
        out.write(view[cut0:])

class _HashingFile:
    """A binary file that hashes what it writes (the manifest records every file's sha256)."""

    def __init__(self, path: Path):
        self.file = open(path, "wb")  # noqa: SIM115 - closed by close()
        self.sha = hashlib.sha256()

    def write(self, data) -> int:
        self.sha.update(data)
        return self.file.write(data)

    def flush(self) -> None:
        self.file.flush()

    def close(self) -> None:
        self.file.close()

def write_graph(world: World, names: dict[str, str], out: Path, n_triples: int,
                malformed_rate: float, gzip: bool) -> tuple[dict, dict, int, int, int]:
    """kg.nt(.gz) and kg.tsv, subject block by subject block: (sha256 by file, triples by
    relation, literal lines, type assertions, malformed lines)."""
    n_literal = sum(world.literal_count(t, lo, min(world.sizes[t], lo + 8 * CHUNK))
                    for t in world.types for lo in range(0, world.sizes[t], 8 * CHUNK))
    malformed = _Malformed(world, names, n_triples + n_literal + world.n_entities,
                           malformed_rate)
    nt_name = "kg.nt.gz" if gzip else "kg.nt"
    (out / ("kg.nt" if gzip else "kg.nt.gz")).unlink(missing_ok=True)
    nt_file, tsv_file = _HashingFile(out / nt_name), _HashingFile(out / "kg.tsv")
    nt = _gzip.GzipFile(filename="kg.nt", mode="wb", fileobj=nt_file, mtime=0,
                        compresslevel=6) if gzip else nt_file
    relation_counts = {names[rel]: 0 for fam in world.families for rel in fam.members}
    written = literal = typed = 0
    for t in world.types:
        for lo in range(0, world.sizes[t], CHUNK):
            hi = min(world.sizes[t], lo + CHUNK)
            text, n_lit, n_typed = world.entity_lines(t, lo, hi)
            nt_edges, tsv_edges, n_edges = _edge_rows(world, names, t, lo, hi, relation_counts)
            n_lines = n_lit + n_typed + n_edges
            malformed.write(nt, text + nt_edges, written, n_lines)
            tsv_file.write(tsv_edges)
            written, literal, typed = written + n_lines, literal + n_lit, typed + n_typed
    if gzip:
        nt.close()
    nt_file.close()
    tsv_file.close()
    assert sum(relation_counts.values()) == n_triples and written == malformed.w, "count drift"
    files = {nt_name: nt_file.sha.hexdigest(), "kg.tsv": tsv_file.sha.hexdigest()}
    return files, relation_counts, literal, typed, malformed.m


def _edge_rows(world: World, names: dict[str, str], t: str, lo: int, hi: int,
               relation_counts: dict[str, int]) -> tuple[bytes, bytes, int]:
    """The N-Triples and TSV lines of the edges of subjects lo..hi-1 of type t, and how many;
    ``relation_counts`` gets them added."""
    nt_parts, tsv_parts, n_edges = [], [], 0
    for f, fam in enumerate(world.families):
        if fam.subj != t:
            continue
        subj, obj, mask = world.edges(f, lo, hi)
        for m, rel in enumerate(fam.members):
            sel = (mask >> m) & 1 == 1
            s, o = subj[sel], obj[sel]
            if fam.kind == "inverse" and m == 1:
                s, o = o, s
            nt_parts.append(world.rows("nt", names[rel], s, o))
            tsv_parts.append(world.rows("tsv", names[rel], s, o))
            relation_counts[names[rel]] += len(s)
            n_edges += len(s)
    return b"".join(nt_parts), b"".join(tsv_parts), n_edges


def write_question_files(out: Path, families: dict, questions: list[dict]) -> dict[str, str]:
    """families.json, questions.jsonl and the split files: sha256 by file."""
    return write_text_files(out, {
        "families.json": json.dumps(families, indent=2) + "\n",
        "questions.jsonl": jsonl_text(questions),
        **{f"{split}.jsonl": jsonl_text(part)
           for split, part in question_splits(questions).items()},
    })

def jsonl_text(records: list[dict]) -> str:
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records)

def write_text_files(out: Path, texts: dict[str, str]) -> dict[str, str]:
    files = {}
    for name, data in texts.items():
        raw = data.encode()
        (out / name).write_bytes(raw)
        files[name] = hashlib.sha256(raw).hexdigest()
    return files
