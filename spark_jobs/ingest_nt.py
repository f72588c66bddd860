"""An N-Triples dump parsed on the driver, a block of lines at a time: no
Spark.

Each file is read in blocks of whole lines (``BLOCK_BYTES``: the parse's memory does not grow with
the dump), each block one Arrow array of lines (split as Spark's text reader splits them:
``\\n``, ``\\r\\n`` or ``\\r``; gzip read through) and classified with ``pyarrow.compute`` — the
regexes of ``spark_jobs.formats`` (``parse_nt``) in RE2, string slices and masks; there is no Python
loop per line. The result is the rows ``spark_jobs.ingest_lines`` derives ingest's tables from
(one per fact line, in (file, line) order) plus the malformed lines and the counts by kind
and reason, so that a full build's tables are those of the Spark ingest, row for row.

What this path does not reproduce exactly raises ``Unsupported`` (the caller then runs the
Spark ingest and reports why): a line holding U+0085, U+2028 or U+2029 (Java's ``$`` and ``.``
treat them as line ends, RE2 does not); a literal whose escapes ``unescapeJava`` reads
differently from ``formats.unescape_nt`` (octal, ``\\u`` without 4 hex digits, an unknown
escape, a UTF-16 surrogate); ``literals_as_edges``; a plan with other parsers.
"""

from __future__ import annotations

import gzip
import zlib
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lokg.runtime.errors import LokgError
from lokg.spark_jobs import formats as fm
from lokg.spark_jobs.ingest_lines import UnreadableLines

_FULL = fm.named_groups(fm.re2(fm._FULL), ("st", "pt", "ot"))
#: The common shape of a statement: single spaces, IRIs, a literal without escapes, and no
#: character that needs a closer look (``_SEP``, Java's other line ends). Every line it
#: matches ``_FULL`` matches with the same three terms.
_NEAR = r"\x01\x{85}\x{2028}\x{2029}"  # _SEP and Java's other line ends: the general path
_SIMPLE_IRI = rf'<[^<>"\t\n\x0B\f\r {_NEAR}]*>'
_SIMPLE = (rf'^(?P<st>{_SIMPLE_IRI}) (?P<pt>{_SIMPLE_IRI}) (?P<ot>{_SIMPLE_IRI}|'
           rf'"[^"\\{_NEAR}]*"(?:@[A-Za-z]+(?:-[A-Za-z0-9]+)*|\^\^{_SIMPLE_IRI})?) \.$')
_LITERAL = r'(?s)^"(?P<text>.*)"(?P<suffix>[^"]*)$'  # text up to the last quote, its suffix
_SKIP = r"^ *(?:#|$)"  # Spark's trim: spaces only
_JAVA_LINE_ENDS = "[\u0085\u2028\u2029]"
_SAFE_ESCAPES = r'\\(?:[tbnrf"\'\\]|u[0-9A-Fa-f]{4}|U[0-9A-Fa-f]{8})'
_SURROGATE = r"\\u[dD][89a-fA-F]"
#: Kind codes of the parse (index into KINDS).
KINDS = (fm.SKIP, fm.MALFORMED, fm.TYPE, fm.EDGE, fm.NAME, fm.ALIAS, fm.DESCRIPTION,
         fm.FILTERED, fm.ATTRIBUTE)
_CODE = {kind: code for code, kind in enumerate(KINDS)}
_READABLE = ("", ".nt", ".gz")
#: Bytes of a file parsed at once (``file_blocks``).
BLOCK_BYTES = 128 << 20


class Unsupported(LokgError):
    """The dump holds something this path would not parse as the Spark ingest does (caught by
    ``spark_jobs.ingest``, which then runs the Spark ingest)."""


def unsupported(plan: fm.Plan, cfg: dict) -> str | None:
    """Why ``plan`` is not for this path (the Spark ingest reads it), or None."""
    parsers = sorted({source.parser for source in plan.sources})
    if parsers != ["nt"]:
        return (f"parsers {', '.join(parsers)}: the driver parses N-Triples alone, or "
                f"{', '.join(fm.LINE_PARSERS)}")
    for path in plan.files:
        if path.suffix not in _READABLE:
            return f"{path.name}: compression read by Spark only"
    if cfg["literals_as_edges"]:
        return "ingest.literals_as_edges is read by the Spark ingest only"
    return None


def file_blocks(path: Path, block_bytes: int | None = None) -> Iterator[pa.LargeBinaryArray]:
    """The lines of a file without their ends, in blocks of whole lines of about
    ``block_bytes`` (a block ends after a ``\\n``, so a ``\\r\\n`` is never split); gzip read
    through (None: ``BLOCK_BYTES``). A file without ``\\n`` (``\\r`` ends only) is one block."""
    block_bytes = block_bytes or BLOCK_BYTES
    try:
        with (gzip.open if path.suffix == ".gz" else open)(path, "rb") as file:
            carry, blocks = b"", 0
            while data := file.read(block_bytes):
                data = carry + data
                cut = data.rfind(b"\n") + 1
                carry = data[cut:]
                if cut:
                    blocks += 1
                    yield _lines(data[:cut])
            if carry or not blocks:  # an empty file is one empty block
                yield _lines(carry)
    except (OSError, EOFError, zlib.error) as exc:
        raise UnreadableLines(f"{path.name}: {exc}") from None


def _lines(data: bytes) -> pa.LargeBinaryArray:
    """``data``'s lines without their ends, as one array (no Python object per line)."""
    raw = np.frombuffer(data, np.uint8)
    cut = np.flatnonzero((raw == 10) | (raw == 13))  # every \r and \n ends a line or is dropped
    crlf = np.zeros(len(cut), bool)  # a \r directly before a \n: the \n ends the line
    crlf[:-1] = (raw[cut[:-1]] == 13) & (cut[1:] == cut[:-1] + 1) & (raw[cut[1:]] == 10)
    ends = np.flatnonzero(~crlf)
    ends = cut[ends] - ends  # where each line ends once the \r and \n bytes are removed
    kept = np.delete(raw, cut)
    last = [len(kept)] if len(kept) > (ends[-1] if len(ends) else 0) else []
    offsets = np.concatenate([[0], ends, last]).astype(np.int64)
    return pa.LargeBinaryArray.from_buffers(pa.large_binary(), len(offsets) - 1,
                                            [None, pa.py_buffer(offsets), pa.py_buffer(kept)])


def decode(lines: pa.LargeBinaryArray) -> tuple[pa.Array, np.ndarray]:
    """The lines as text, a leading byte-order mark dropped, and which were not valid UTF-8
    (their bad bytes shown as U+FFFD, as the line rules of ``formats.parse_line`` show them)."""
    bad = _invalid_utf8(lines, 0)
    invalid = np.zeros(len(lines), bool)
    invalid[bad] = True
    if bad:
        fixed = [lines[i].as_py().decode("utf-8", "replace").encode() for i in bad]
        lines = pc.replace_with_mask(lines, pa.array(invalid), pa.array(fixed, pa.large_binary()))
    text = lines.cast(pa.large_string())
    bom = pc.starts_with(text, "\ufeff")
    if pc.any(bom).as_py():
        text = pc.if_else(bom, pc.utf8_slice_codeunits(text, 1), text)
    return text, invalid


def _invalid_utf8(lines: pa.Array, base: int) -> list[int]:
    """Indices (from ``base``) of the lines that are not UTF-8: halves of the array are cast
    until the bad lines are found, so valid text costs one cast."""
    try:
        lines.cast(pa.large_string())
        return []
    except pa.ArrowInvalid:
        pass
    if len(lines) <= 64:
        return [base + i for i, raw in enumerate(lines.to_pylist()) if not _is_utf8(raw)]
    half = len(lines) // 2
    return _invalid_utf8(lines[:half], base) + _invalid_utf8(lines[half:], base + half)


def _is_utf8(raw: bytes) -> bool:
    try:
        raw.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


def _mask(flags) -> np.ndarray:
    return flags.to_numpy(zero_copy_only=False)


def _iri_key(terms: pa.Array) -> pa.Array:
    """``formats._iri_key``: ``<iri>`` → Freebase local name or the IRI; others unchanged."""
    fb = "<" + fm.FREEBASE_NS
    return pc.if_else(pc.starts_with(terms, fb), pc.utf8_slice_codeunits(terms, len(fb), -1),
                      pc.if_else(pc.starts_with(terms, "<"),
                                 pc.utf8_slice_codeunits(terms, 1, -1), terms))


def _predicates(terms: pa.Array) -> pa.Array:
    """``_iri_key`` of the predicate terms, computed once per distinct predicate."""
    encoded = pc.dictionary_encode(terms)
    return _iri_key(encoded.dictionary).take(encoded.indices)


def _lang_ok(lang: pa.Array, languages: list[str]) -> np.ndarray:
    """``formats._lang_ok``: the tag is a configured language or a subtag of one."""
    lang = pc.utf8_lower(lang)
    keep = np.zeros(len(lang), bool)
    for code in languages:
        code = (code or "").lower()
        keep |= _mask(pc.equal(lang, code))
        if code:
            keep |= _mask(pc.starts_with(lang, code + "-"))
    return keep


def _objects(terms: pa.Array, languages: list[str]) -> tuple[pa.Array, np.ndarray, np.ndarray]:
    """Object keys or literal texts (still escaped), which are literals, and which literals
    are in a configured language."""
    lit = _mask(pc.starts_with(terms, '"'))
    objects = _iri_key(terms)
    keep = np.zeros(len(terms), bool)
    if lit.any():
        parts = pc.extract_regex(terms.filter(pa.array(lit)), _LITERAL).flatten()
        text, suffix = parts
        lang = pc.if_else(pc.starts_with(suffix, "@"), pc.utf8_slice_codeunits(suffix, 1), "")
        keep[lit] = _lang_ok(lang, languages)
        objects = pc.replace_with_mask(objects, pa.array(lit), text)
    return objects, lit, keep


def _kinds(p: pa.Array, lit: np.ndarray, keep: np.ndarray) -> np.ndarray:
    """``formats._nt_kind`` of the well-formed statements, as codes into ``KINDS``."""
    def among(predicates):
        return _mask(pc.is_in(p, pa.array(predicates, p.type)))

    name, alias, desc = (among(fm.NAME_PREDICATES), among(fm.ALIAS_PREDICATES),
                         among(fm.DESCRIPTION_PREDICATES))
    return np.select(
        [among(fm.TYPE_PREDICATES), ~lit, name & keep, alias & keep, desc & keep,
         name | alias | desc],
        [_CODE[k] for k in (fm.TYPE, fm.EDGE, fm.NAME, fm.ALIAS, fm.DESCRIPTION, fm.FILTERED)],
        _CODE[fm.ATTRIBUTE]).astype(np.int8)


def _unescaped(objects: pa.Array, lit: np.ndarray, kinds: np.ndarray) -> pa.Array:
    """Literal texts of the facts that use them unescaped by ``formats.unescape_nt`` — what
    the Spark ingest's ``unescapeJava`` gives for every escape allowed here (see the module
    doc); a Python call per escaped literal only."""
    used = np.isin(kinds, [_CODE[k] for k in (*fm.LITERAL_KINDS, fm.TYPE)])
    escaped = lit & used & _mask(pc.match_substring(objects, "\\"))
    if not escaped.any():
        return objects
    texts = objects.filter(pa.array(escaped))
    java = pc.invert(pc.match_substring(texts, "\\U"))  # the Spark ingest's unescapeJava rows
    odd = pc.match_substring(pc.replace_substring_regex(texts, _SAFE_ESCAPES, ""), "\\")
    if pc.any(pc.and_(java, odd)).as_py() or pc.any(pc.match_substring_regex(
            texts, _SURROGATE)).as_py():
        raise Unsupported("a literal escape that unescapeJava reads otherwise (octal, short "
                          "\\u, unknown escape or surrogate)")
    plain = pa.array([fm.unescape_nt(t) for t in texts.to_pylist()], objects.type)
    return pc.replace_with_mask(objects, pa.array(escaped), plain)


def _diagnoses(text: pa.Array) -> list[str]:
    """``formats._nt_diagnosis`` of lines that are neither statements nor control/empty-IRI
    cases: the first pattern that matches, else ``R_GARBAGE``."""
    reasons = np.full(len(text), fm.R_GARBAGE, object)
    for pattern, reason in reversed(fm._DIAGNOSES):
        reasons[_mask(pc.match_substring_regex(text, fm.re2(pattern)))] = reason
    return reasons.tolist()


def _statements(text: pa.Array, invalid: np.ndarray) -> dict:
    """Which lines are one statement (``formats._FULL``, no control separator), their
    subject, predicate and object terms (those lines in order, then the others), and which
    lines are skipped or hold the separator. Lines in the common shape (``_SIMPLE``) are
    split by one regex with no backtracking; ``_FULL`` and the rest run on the others only."""
    simple = pc.extract_regex(text, _SIMPLE)
    common = _mask(simple.is_valid()) & ~invalid
    rest = np.flatnonzero(~common)
    others = text.take(pa.array(rest))
    if pc.any(pc.match_substring_regex(others, _JAVA_LINE_ENDS)).as_py():
        raise Unsupported("U+0085, U+2028 or U+2029 in a line (a line end to Java's regexes)")
    skip, ctl, full = (np.zeros(len(text), bool) for _ in range(3))
    skip[rest] = _mask(pc.match_substring_regex(others, _SKIP))
    ctl[rest] = _mask(pc.match_substring(others, fm._SEP))
    terms = pc.extract_regex(others, _FULL)
    matched = _mask(terms.is_valid()) & ~(skip | ctl | invalid)[rest]
    full[common] = True
    full[rest[matched]] = True
    columns = [pa.chunked_array([a.filter(pa.array(m)) for a, m in (
        (simple.field(name), common), (terms.field(name), matched))]).combine_chunks()
        for name in ("st", "pt", "ot")]
    order = np.concatenate([np.flatnonzero(common), rest[matched]])
    return {"terms": columns, "lines": order, "skip": skip, "ctl": ctl, "full": full}


def _parse_file(index: int, path: Path, languages: list[str]) -> list[dict]:
    """One file's parsed blocks (``_parse_block``), line numbers running on across them."""
    parts, before = [], 0
    for lines in file_blocks(path):
        parts.append(_parse_block(index, before, lines, languages))
        before += len(lines)
    return parts


def _parse_block(index: int, before: int, lines: pa.LargeBinaryArray, languages: list[str]
                 ) -> dict:
    """A block's fact rows, malformed rows and kind codes of all its lines (``before``: the
    file's lines in earlier blocks)."""
    text, invalid = decode(lines)
    found = _statements(text, invalid)
    st, pt, ot = found["terms"]
    empty = _mask(pc.or_(pc.or_(pc.equal(st, "<>"), pc.equal(pt, "<>")), pc.equal(ot, "<>")))
    keys = pa.array(~empty)
    s, p = _iri_key(st.filter(keys)), _predicates(pt.filter(keys))
    o, lit, keep = _objects(ot.filter(keys), languages)
    kinds = _kinds(p, lit, keep)
    lines = found["lines"][~empty]
    codes = np.full(len(text), _CODE[fm.MALFORMED], np.int8)
    codes[found["skip"]] = _CODE[fm.SKIP]
    codes[lines] = kinds
    facts = pa.table({"file_idx": pa.array(np.full(len(lines), index, np.int32)),
                      "line": pa.array(before + lines + 1, pa.int64()),
                      "graph": np.ones(len(lines), bool),
                      "kind": pa.array(KINDS).take(pa.array(kinds)), "s": s, "p": p,
                      "o": _unescaped(o, lit, kinds)})
    return {"facts": facts, "codes": codes, "malformed": _malformed(
        index, before, text, codes, invalid, found["ctl"], found["full"])}


def _malformed(index: int, before: int, text: pa.Array, codes: np.ndarray,
               invalid: np.ndarray, ctl: np.ndarray, full: np.ndarray) -> pa.Table:
    """The malformed lines with their reasons, in the order of ``formats._nt_diagnosis``."""
    bad = np.flatnonzero(codes == _CODE[fm.MALFORMED])
    reasons = np.full(len(bad), None, object)
    reasons[ctl[bad]] = fm.R_CONTROL
    reasons[full[bad]] = fm.R_EMPTY_IRI
    rest = ~(ctl[bad] | full[bad] | invalid[bad])
    reasons[rest] = _diagnoses(text.take(pa.array(bad[rest])))
    reasons[invalid[bad]] = fm.R_INVALID_UTF8
    return pa.table({"file_idx": pa.array(np.full(len(bad), index, np.int32)),
                     "line": pa.array(before + bad + 1, pa.int64()),
                     "kind": pa.array([fm.MALFORMED] * len(bad), pa.string()),
                     "reason": pa.array(reasons.tolist(), pa.string()),
                     "text": text.take(pa.array(bad)).cast(pa.string())})


class ParsedDump:
    """Every line of an N-Triples plan classified: ``rows`` (the fact lines, as
    ``ingest_lines`` derives tables from), ``malformed`` (file_idx, line, kind, reason, text)
    and ``counts`` by (kind, reason, escaped) as the Spark ingest counts its parse."""

    store = None  # no line store: an N-Triples dump is parsed whole in every build

    def __init__(self, plan: fm.Plan, languages: list[str]):
        parts = [part for i, path in enumerate(plan.files)
                 for part in _parse_file(i, path, languages)]
        self.rows = pa.concat_tables([part["facts"] for part in parts])
        self.malformed = pa.concat_tables([part["malformed"] for part in parts])
        codes = np.concatenate([part["codes"] for part in parts])
        self.counts = {(KINDS[code], None, fm.ESC_NONE): int(n)
                       for code, n in enumerate(np.bincount(codes, minlength=len(KINDS)))
                       if n and KINDS[code] != fm.MALFORMED}
        by_reason = self.malformed.group_by("reason").aggregate([("line", "count")])
        for reason, n in zip(by_reason["reason"].to_pylist(), by_reason["line_count"].to_pylist()):
            self.counts[(fm.MALFORMED, reason, fm.ESC_NONE)] = n
        self.lines = self.parsed = len(codes)
