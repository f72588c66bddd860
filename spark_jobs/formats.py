"""Dump formats of the ingest stage: format detection, file listing and line parsers.

Every parser turns each line of its files into one row with a ``kind`` (below), its terms and,
for a malformed line, a reason: the rules are SQL (``spark_jobs.ingest_sql``) built from the
grammar, the predicates and the reasons this module declares.

Formats:

* ``nt`` / ``synth`` — Freebase-style N-Triples (plain or ``.gz``). Freebase IRIs
  ``<http://rdf.freebase.com/ns/m.0abc>`` become the key ``m.0abc`` (their local name); other
  IRIs keep the full IRI; blank nodes keep their ``_:label``. ``synth`` reads ``kg.nt(.gz)`` of a
  directory written by ``pipeline.synth``.
* ``tsv`` — ``s \\t r \\t o``; key = token.
* ``pathquestion`` — ``kb.txt`` with ``s \\t r \\t o``; name = key with ``_`` → space.
* ``metaqa`` — MetaQA's ``kb.txt``: ``subject|relation|object`` with plain-text names (spaces
  and all); key = name = the field as written (trimmed). Names never hold ``|`` in MetaQA, so a
  line with other than 3 ``|``-separated fields is malformed; a leading ``#`` is part of a title
  (``#Horror``), not a comment. Detected (``auto``) as a directory with ``kb.txt`` beside
  question files ``qa_*.txt`` or ``<n>-hop/`` folders.
* ``fb15k237`` — ``train.txt valid.txt test.txt`` (``/m/mid \\t /rel/path \\t /m/mid``) plus
  ``entity2name.txt`` (``mid \\t name``).
* an optional entities file (config ``ingest.entities_file``): JSONL
  ``{"key", "name", "aliases", "description"}`` or TSV ``key \\t name``, line by line.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from lokg.common.dumps import FORMATS
from lokg.runtime.errors import LokgError

FREEBASE_NS = "http://rdf.freebase.com/ns/"
RDF_TYPE = "http://www.w3.org/1999/02/22-rdf-syntax-ns#type"
RDFS_LABEL = "http://www.w3.org/2000/01/rdf-schema#label"
#: Predicates (after key mapping) with a special meaning.
NAME_PREDICATES = ("type.object.name", RDFS_LABEL)
ALIAS_PREDICATES = ("common.topic.alias",)
DESCRIPTION_PREDICATES = ("common.topic.description",)
TYPE_PREDICATES = ("type.object.type", RDF_TYPE)

# ---- kinds of parsed lines
SKIP = "skip"  # blank line or '#' comment
EDGE = "edge"  # IRI-valued fact: a graph triple (s, p, o)
NAME = "name"  # name literal o of s
ALIAS = "alias"
DESCRIPTION = "description"
ATTRIBUTE = "attribute"  # other literal fact: attribute {key: p, value: o} of s
TYPE = "type"  # type assertion (s, type o): not a graph edge
FILTERED = "filtered"  # name/alias/description literal in a language not configured
RECORD = "record"  # entities-file record: s key, o name, p description, extra aliases
MALFORMED = "malformed"
LITERAL_KINDS = (NAME, ALIAS, DESCRIPTION, ATTRIBUTE)

# ---- malformed-line reasons (N-Triples)
R_EMPTY_IRI = "empty IRI <>"
R_NO_DOT = "missing the terminating ' .'"
R_TWO_TERMS = "only 2 terms (expected subject predicate object .)"
R_ONE_TERM = "only 1 term (expected subject predicate object .)"
R_MANY_TERMS = "more than 3 terms"
R_LITERAL_SUBJECT = "literal in subject position"
R_PREDICATE = "predicate is not an IRI"
R_UNTERMINATED_LITERAL = "unterminated literal (missing closing quote)"
R_UNTERMINATED_IRI = "unterminated IRI (missing '>')"
R_LITERAL_SUFFIX = "invalid language tag or datatype after literal"
R_CONTROL = "control character U+0001 in line"
R_INVALID_UTF8 = "invalid UTF-8 (bad bytes shown as U+FFFD)"
R_GARBAGE = "not an N-Triples statement"
# ---- malformed-line reasons (tab-separated formats)
R_EMPTY_FIELD = "empty field"
R_BAD_JSON = "invalid JSON entity record (need an object with a non-empty string 'key')"


class FormatError(LokgError, ValueError):
    """The dump cannot be read as the requested format; the message names the path."""


#: The formats whose dump is one ``kb.txt`` (or that file): its parser, the name rule of
#: :class:`Plan` and the dataset's name for messages.
KB_FORMATS = {"pathquestion": ("triples_tsv", "underscores", "PathQuestion"),
              "metaqa": ("triples_psv", "key", "MetaQA")}


@dataclass(frozen=True)
class Source:
    """Files read with one parser. ``graph``: its subjects/objects define entities."""

    parser: str  # nt | triples_tsv | triples_psv | names_tsv | entities
    files: tuple[Path, ...]
    graph: bool


@dataclass
class Plan:
    """What ``ingest`` reads: the resolved format and its sources, in file order."""

    format: str
    sources: list[Source] = field(default_factory=list)
    name_rule: str = "key"  # key | underscores: the name of an entity the sources do not name

    @property
    def files(self) -> list[Path]:
        return [f for source in self.sources for f in source.files]


# --------------------------------------------------------------------------------------------
# format detection and file listing


def _is_nt(path: Path) -> bool:
    return path.name.endswith(".nt") or path.name.endswith(".nt.gz")


def _data_files(root: Path) -> list[Path]:
    return sorted(
        p for p in root.rglob("*")
        if p.is_file()
        and not any(part.startswith((".", "_")) for part in p.relative_to(root).parts)
    )


def _kb_format(root: Path) -> str:
    """The format of a ``kb.txt`` in ``root``: MetaQA keeps its questions beside it as
    ``qa_*.txt`` or in ``<n>-hop/`` folders; PathQuestion as ``train.txt`` etc."""
    metaqa = any(root.glob("qa_*.txt")) or any(p.is_dir() for p in root.glob("*-hop"))
    return "metaqa" if metaqa else "pathquestion"


def detect_format(dump: Path) -> str:
    """``auto``: fb15k237 / pathquestion / metaqa / synth / nt / tsv from the dump's files."""
    if dump.is_dir():
        if (dump / "entity2name.txt").is_file():
            return "fb15k237"
        if (dump / "kb.txt").is_file():
            return _kb_format(dump)
        if (dump / "kg.nt").is_file() or (dump / "kg.nt.gz").is_file():
            return "synth"
        if any(_is_nt(p) for p in _data_files(dump)):
            return "nt"
        return "tsv"
    if dump.name == "kb.txt":
        return _kb_format(dump.parent)
    return "nt" if _is_nt(dump) else "tsv"


def resolve(dump: str | Path, fmt: str = "auto", entities_file: str | Path | None = None) -> Plan:
    """The format and the files of a dump. Raises FormatError naming what is missing."""
    dump = Path(dump).resolve()
    if not dump.exists():
        raise FormatError(f"dump not found: {dump}")
    if fmt not in FORMATS:
        raise FormatError(f"ingest.format={fmt!r}: unknown (choose one of {', '.join(FORMATS)})")
    if fmt == "auto":
        fmt = detect_format(dump)
    plan = Plan(format=fmt)
    _add_dump_sources(plan, dump)
    if entities_file:
        path = Path(entities_file).resolve()
        if not path.is_file():
            raise FormatError(f"ingest.entities_file={entities_file}: file not found")
        plan.sources.append(Source("entities", (path,), False))
    return plan


def _add_dump_sources(plan: Plan, dump: Path) -> None:
    """The sources of the dump itself in ``plan.format`` (a KB format sets its name rule)."""
    fmt = plan.format
    if fmt == "nt":
        files = [dump] if dump.is_file() else [p for p in _data_files(dump) if _is_nt(p)]
        if not files:
            raise FormatError(f"{dump}: no *.nt or *.nt.gz files (ingest.format=nt)")
        plan.sources.append(Source("nt", tuple(files), True))
    elif fmt == "synth":
        candidates = [dump / "kg.nt", dump / "kg.nt.gz"] if dump.is_dir() else []
        found = [p for p in candidates if p.is_file()]
        if not found:
            raise FormatError(
                f"{dump}: synthetic dump needs kg.nt or kg.nt.gz (ingest.format=synth)")
        plan.sources.append(Source("nt", (found[0],), True))  # kg.nt wins if both exist
    elif fmt in KB_FORMATS:
        parser, plan.name_rule, what = KB_FORMATS[fmt]
        kb = dump / "kb.txt" if dump.is_dir() else dump
        if not kb.is_file():
            raise FormatError(f"{dump}: {what} dump needs kb.txt (ingest.format={fmt})")
        plan.sources.append(Source(parser, (kb,), True))
    elif fmt == "fb15k237":
        if not dump.is_dir():
            raise FormatError(
                f"{dump}: FB15k-237 dump must be a directory (ingest.format=fb15k237)")
        splits = [dump / n for n in ("train.txt", "valid.txt", "test.txt") if (dump / n).is_file()]
        if not splits:
            raise FormatError(f"{dump}: FB15k-237 dump needs train.txt/valid.txt/test.txt")
        plan.sources.append(Source("triples_tsv", tuple(splits), True))
        if (dump / "entity2name.txt").is_file():
            plan.sources.append(Source("names_tsv", (dump / "entity2name.txt",), False))
    else:  # tsv
        files = [dump] if dump.is_file() else _data_files(dump)
        if not files:
            raise FormatError(f"{dump}: no files to read (ingest.format=tsv)")
        plan.sources.append(Source("triples_tsv", tuple(files), True))


# ---- the N-Triples grammar ------------------------------------------------------------------

_IRI = r'<[^<>"\s]*>'
_BNODE = r"_:[A-Za-z0-9_](?:[A-Za-z0-9_.\-]*[A-Za-z0-9_\-])?"
_STR = r'"[^"\\]*+(?:\\.[^"\\]*+)*+"'  # unrolled and possessive: no backtracking, no recursion
_LIT = _STR + r"(?:@[A-Za-z]+(?:-[A-Za-z0-9]+)*|\^\^" + _IRI + ")?"
_TERM = f"(?:{_IRI}|{_BNODE}|{_LIT})"
_WS, _OWS = r"[ \t]+", r"[ \t]*"
_END = _OWS + r"(?:#.*)?$"
_FULL = f"^{_OWS}({_IRI}|{_BNODE}){_WS}({_IRI}){_WS}({_IRI}|{_BNODE}|{_LIT}){_OWS}\\.{_END}"
_DOT_OPT = f"{_OWS}(?:\\.{_OWS})?$"
#: (pattern, reason) tried in order on lines that are not a valid statement.
_DIAGNOSES = (
    (f"^{_OWS}(?:{_TERM}{_WS}){{0,2}}<>(?:[ \\t]|$)", R_EMPTY_IRI),
    (f"^{_OWS}{_TERM}{_WS}{_TERM}{_WS}{_TERM}{_OWS}$", R_NO_DOT),
    (f"^{_OWS}{_TERM}{_WS}{_TERM}{_DOT_OPT}", R_TWO_TERMS),
    (f"^{_OWS}{_TERM}{_DOT_OPT}", R_ONE_TERM),
    (f"^{_OWS}{_TERM}(?:{_WS}{_TERM}){{3,}}{_DOT_OPT}", R_MANY_TERMS),
    (f"^{_OWS}{_LIT}{_WS}{_TERM}{_WS}{_TERM}{_OWS}\\.{_END}", R_LITERAL_SUBJECT),
    (f"^{_OWS}{_TERM}{_WS}{_TERM}{_WS}{_TERM}{_OWS}\\.{_END}", R_PREDICATE),
    (f'^{_OWS}(?:{_TERM}{_WS}){{0,2}}"[^"\\\\]*+(?:\\\\.[^"\\\\]*+)*+\\\\?$',
     R_UNTERMINATED_LITERAL),
    (f'^{_OWS}(?:{_TERM}{_WS}){{0,2}}<[^<>"\\s]*(?:[ \\t]|$)', R_UNTERMINATED_IRI),
    (f"^{_OWS}(?:{_TERM}{_WS}){{2}}{_STR}[@^]", R_LITERAL_SUFFIX),
)
_SEP = "\u0001"


def re2(pattern: str) -> str:
    """A regex of this module (Java) as RE2 — DuckDB's engine:
    possessive ``*+`` → ``*`` (RE2 never backtracks, so the match is the same) and ``\\s`` →
    Java's whitespace class (RE2's lacks ``\\x0B``)."""
    return pattern.replace("*+", "*").replace(r"\s", r"\t\n\x0B\f\r ")


# ---- field-separated formats ----------------------------------------------------------------

def fields_reason(expected: str, found) -> str:
    """The reason of a line with the wrong number of fields (``found``)."""
    return f"expected {expected}, found {found}"


#: What a ``names_tsv`` line must hold (its malformed reason names it).
NAME_FIELDS = "2 tab-separated fields (key, name)"


def triple_fields(parser: str) -> str:
    """What a line of a triple parser must hold (its malformed reason names it)."""
    return f"3 {TRIPLE_PARSERS[parser][1]} fields (subject, relation, object)"


#: The triple parsers: (separator as a Java regex, how a message names it, whether a line
#: starting with ``#`` is a comment). MetaQA's names are movie titles and may start with ``#``.
TRIPLE_PARSERS = {"triples_tsv": ("\t", "tab-separated", True),
                  "triples_psv": (r"\|", "'|'-separated", False)}


#: Parsers of a line format: a line's parse depends on its bytes alone, so a build keeps its
#: parsed lines (the line store ``dump_lines``) for a refresh (``spark_jobs.ingest``).
LINE_PARSERS = (*TRIPLE_PARSERS, "names_tsv")


# --------------------------------------------------------------------------------------------
# literal unescaping


def _make_unescape():
    """Build the N-Triples unescape function as a closure, so that Spark pickles it by value
    (Python workers then need no access to this repository)."""
    hexdigits = frozenset("0123456789abcdefABCDEF")
    simple = {"t": "\t", "b": "\b", "n": "\n", "r": "\r", "f": "\f", '"': '"', "'": "'",
              "\\": "\\"}

    def unescape(text):
        """N-Triples string escapes: \\t \\b \\n \\r \\f \\" \\' \\\\ \\uXXXX \\UXXXXXXXX."""
        if text is None or "\\" not in text:
            return text
        out, i, n = [], 0, len(text)
        while i < n:
            ch = text[i]
            if ch == "\\" and i + 1 < n:
                nxt = text[i + 1]
                width = 4 if nxt == "u" else 8 if nxt == "U" else 0
                digits = text[i + 2:i + 2 + width]
                if width and len(digits) == width and all(c in hexdigits for c in digits):
                    try:
                        out.append(chr(int(digits, 16)))
                        i += 2 + width
                        continue
                    except ValueError:  # beyond U+10FFFF: keep the text as it is
                        pass
                if not width and nxt in simple:
                    out.append(simple[nxt])
                    i += 2
                    continue
            out.append(ch)
            i += 1
        return "".join(out)

    return unescape


unescape_nt = _make_unescape()
