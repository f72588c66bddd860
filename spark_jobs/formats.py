"""Dump formats of the ingest stage: format detection, file listing and line parsers.

Every parser turns the raw lines of its files into one row per line with the columns of
``PARSED_COLUMNS`` (see ``kind``), using Spark SQL expressions only (regexes run in the JVM).
``read_lines`` keeps, for every line, the file it came from, the start of the file split that
holds it and a per-partition counter, from which ``spark_jobs.ingest`` derives the exact 1-based
line number within the file (a split never shares a line with another split, and lines are
read in file order within a split).

Formats (DESIGN §2.1):

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

import re
from dataclasses import dataclass, field
from pathlib import Path

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StringType

from lokg.spark_jobs.settings import FORMATS
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
# ---- the ``escaped`` column: how a literal's text must be unescaped
ESC_NONE, ESC_JVM, ESC_PYTHON = 0, 1, 2  # nothing / commons-text in the JVM / \U escapes: Python
LITERAL_KINDS = (NAME, ALIAS, DESCRIPTION, ATTRIBUTE)

#: One row per line; ``escaped`` marks N-Triples literals whose text still carries escapes.
PARSED_COLUMNS = ("fp", "bs", "mid", "graph", "kind", "s", "p", "o", "extra", "escaped",
                  "reason", "text")

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
    """``auto``: fb15k237 / pathquestion / metaqa / synth / nt / tsv from the dump's files
    (DESIGN §2.1)."""
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
    if entities_file:
        path = Path(entities_file).resolve()
        if not path.is_file():
            raise FormatError(f"ingest.entities_file={entities_file}: file not found")
        plan.sources.append(Source("entities", (path,), False))
    return plan


# --------------------------------------------------------------------------------------------
# reading lines


def read_lines(spark: SparkSession, files: list[Path]) -> DataFrame:
    """Lines of the files with (fp: file URI, bs: split start, mid: in-split order key); a
    UTF-8 byte-order mark at the start of a file is dropped."""
    value = F.col("value")
    return spark.read.text([str(f) for f in files]).select(
        F.col("_metadata.file_path").alias("fp"),
        F.col("_metadata.file_block_start").alias("bs"),
        F.monotonically_increasing_id().alias("mid"),
        F.when(value.startswith("\ufeff"), F.substring(value, 2, 1 << 30)).otherwise(value)
        .alias("value"),
    )


def _is_skip(value: Column) -> Column:
    stripped = F.trim(value)
    return (stripped == "") | stripped.startswith("#")


def _row(df: DataFrame, graph: bool, kind: Column, s: Column, p: Column, o: Column,
         reason: Column, extra: Column | None = None, escaped: Column | None = None) -> DataFrame:
    """The ``PARSED_COLUMNS`` of a parser's classification, for every format alike: a line
    that is not valid UTF-8 is malformed whatever the parser made of it (Spark reads bytes
    unchecked, and decoding them later would turn them silently into U+FFFD), and the text
    of a malformed line is made valid UTF-8 so that the quarantine always reads back."""
    invalid = ~F.is_valid_utf8(F.col("value")) & (kind != F.lit(SKIP))
    kind = F.when(invalid, F.lit(MALFORMED)).otherwise(kind)
    reason = F.when(invalid, F.lit(R_INVALID_UTF8)).otherwise(reason)
    plain = F.lit(ESC_NONE)
    escaped = plain if escaped is None else F.when(invalid, plain).otherwise(escaped)
    is_bad = kind == F.lit(MALFORMED)
    return df.select(
        "fp", "bs", "mid",
        F.lit(graph).alias("graph"),
        kind.alias("kind"),
        s.cast("string").alias("s"),
        p.cast("string").alias("p"),
        o.cast("string").alias("o"),
        (extra if extra is not None else F.lit(None)).cast("array<string>").alias("extra"),
        escaped.cast("int").alias("escaped"),
        F.when(is_bad, reason).cast("string").alias("reason"),
        F.when(is_bad, F.make_valid_utf8(F.col("value"))).alias("text"),
    )


# ---- N-Triples --------------------------------------------------------------------------------

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
    """A regex of this module (Java) as RE2 — DuckDB's and pyarrow.compute's engine:
    possessive ``*+`` → ``*`` (RE2 never backtracks, so the match is the same) and ``\\s`` →
    Java's whitespace class (RE2's lacks ``\\x0B``)."""
    return pattern.replace("*+", "*").replace(r"\s", r"\t\n\x0B\f\r ")


def named_groups(pattern: str, names: tuple[str, ...]) -> str:
    """``pattern`` with its capturing groups named ``names`` in order (RE2's
    ``extract_regex`` reports named groups only)."""
    pieces = iter(names)
    return re.sub(r"(?<!\\)\((?!\?)", lambda _: f"(?P<{next(pieces)}>", pattern)


def _iri_key(term: Column) -> Column:
    """``<iri>`` → Freebase local name or the full IRI; ``_:b`` stays as is. Prefix tests and
    substrings, no regex: this runs on the subject and predicate of every line."""
    fb = "<" + FREEBASE_NS
    local = term.substr(F.lit(len(fb) + 1), F.length(term) - len(fb) - 1)
    iri = term.substr(F.lit(2), F.length(term) - 2)
    return (F.when(term.startswith(fb), local).when(term.startswith("<"), iri)
            .otherwise(term))


def _lang_ok(lang: Column, languages: list[str]) -> Column:
    """A literal is kept when its tag equals a configured language (``""``: untagged) or is a
    subtag of one (``en`` keeps ``en-GB``); case-insensitive."""
    lang = F.lower(lang)
    cond = F.lit(False)
    for code in languages:
        code = (code or "").lower()
        cond = cond | (lang == code)
        if code:
            cond = cond | lang.startswith(code + "-")
    return cond


def parse_nt(lines: DataFrame, graph: bool, languages: list[str]) -> DataFrame:
    """Classify N-Triples lines: edge, type, name/alias/description/filtered, attribute, malformed.

    One regex pass splits a valid statement into its three terms; the diagnosis regexes run only
    on lines that fail it. Built as successive projections so that no expensive expression is
    evaluated twice.
    """
    df = _nt_terms(lines)
    o_lit = F.col("_lit")
    df = df.withColumn("_kind", _nt_kind(F.col("value"), F.col("_p"), o_lit,
                                         _lang_ok(F.col("_lang"), languages)))
    fact = ~F.col("_kind").isin(SKIP, MALFORMED)
    o = F.col("_o")
    escaped = (F.when(fact & o_lit & (F.instr(o, "\\U") > 0), F.lit(ESC_PYTHON))
               .when(fact & o_lit & (F.instr(o, "\\") > 0), F.lit(ESC_JVM))
               .otherwise(F.lit(ESC_NONE)))
    return _row(df, graph, F.col("_kind"), s=F.when(fact, F.col("_s")), p=F.when(fact, F.col("_p")),
                o=F.when(fact, o), reason=_nt_diagnosis(F.col("value")), escaped=escaped)


def _nt_terms(lines: DataFrame) -> DataFrame:
    """The lines with their terms: ``_ok`` (one statement, no control separator), keys ``_s``,
    ``_p``, ``_o`` (a literal's text), ``_lit``, ``_lang``, ``_empty`` (an ``<>`` term)."""
    value = F.col("value")
    marked = F.regexp_replace(value, _FULL, f"{_SEP}$1{_SEP}$2{_SEP}$3")
    df = lines.select("*", F.split(marked, _SEP).alias("_t"),
                      (F.instr(value, _SEP) > 0).alias("_ctl"))
    df = df.select(
        "*",
        ((~F.col("_ctl")) & (F.size("_t") == 4)).alias("_ok"),
        F.get("_t", 1).alias("_st"), F.get("_t", 2).alias("_pt"), F.get("_t", 3).alias("_ot"),
    )
    o_term = F.col("_ot")
    # a literal term (checked by _FULL) is "text" then @lang, ^^<iri> or nothing, none of
    # which holds a quote: the suffix is what follows the last quote
    suffix = F.substring_index(o_term, '"', -1)
    df = df.select(
        "*",
        _iri_key(F.col("_st")).alias("_s"),
        _iri_key(F.col("_pt")).alias("_p"),
        o_term.startswith('"').alias("_lit"),
        F.when(o_term.startswith('"'), suffix).alias("_suffix"),
        ((F.col("_st") == "<>") | (F.col("_pt") == "<>") | (o_term == "<>")).alias("_empty"),
    )
    suffix = F.col("_suffix")
    return df.select(
        "*",
        F.when(F.col("_lit"), o_term.substr(F.lit(2), F.length(o_term) - F.length(suffix) - 2))
        .otherwise(_iri_key(o_term)).alias("_o"),
        F.when(suffix.startswith("@"), suffix.substr(F.lit(2), F.length(suffix)))
        .otherwise(F.lit("")).alias("_lang"),
    )


def _nt_kind(value, p_name, o_lit, keep):
    """What a line is, given its terms (``keep``: the literal's language is wanted)."""
    return (
        F.when(_is_skip(value), F.lit(SKIP))
        .when(~F.col("_ok") | F.col("_empty"), F.lit(MALFORMED))
        .when(p_name.isin(*TYPE_PREDICATES), F.lit(TYPE))
        .when(~o_lit, F.lit(EDGE))
        .when(p_name.isin(*NAME_PREDICATES) & keep, F.lit(NAME))
        .when(p_name.isin(*ALIAS_PREDICATES) & keep, F.lit(ALIAS))
        .when(p_name.isin(*DESCRIPTION_PREDICATES) & keep, F.lit(DESCRIPTION))
        .when(p_name.isin(*NAME_PREDICATES, *ALIAS_PREDICATES, *DESCRIPTION_PREDICATES),
              F.lit(FILTERED))
        .otherwise(F.lit(ATTRIBUTE))
    )


def _nt_diagnosis(value):
    """Why a malformed line was refused (evaluated only for the lines quarantined)."""
    diagnosis = F.when(F.col("_ctl"), F.lit(R_CONTROL)).when(F.col("_ok"), F.lit(R_EMPTY_IRI))
    for pattern, reason in _DIAGNOSES:
        diagnosis = diagnosis.when(value.rlike(pattern), F.lit(reason))
    return diagnosis.otherwise(F.lit(R_GARBAGE))


# ---- field-separated formats -------------------------------------------------------------


def _fields_reason(n: Column, expected: str) -> Column:
    return F.concat(F.lit(fields_reason(expected, "")), n.cast("string"))


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


def parse_triples(lines: DataFrame, graph: bool, parser: str) -> DataFrame:
    """``s \\t r \\t o`` lines (``triples_psv``: ``s|r|o``); blank lines (and, but for
    ``triples_psv``, ``#`` comments) are skipped; anything else but exactly three non-empty
    fields is malformed. A line whose relation is a type predicate (``type.object.type``)
    asserts ``o`` as a type of ``s``, as in N-Triples: not a graph edge."""
    separator, _, comments = TRIPLE_PARSERS[parser]
    value = F.col("value")
    skip = _is_skip(value) if comments else F.trim(value) == ""
    df = lines.select("*", F.split(value, separator).alias("_f"))
    f = F.col("_f")
    s, p, o = F.trim(F.get(f, 0)), F.trim(F.get(f, 1)), F.trim(F.get(f, 2))
    n = F.size(f)
    full = (s != "") & (p != "") & (o != "")
    kind = (F.when(skip, F.lit(SKIP))
            .when((n == 3) & full & p.isin(*TYPE_PREDICATES), F.lit(TYPE))
            .when((n == 3) & full, F.lit(EDGE))
            .otherwise(F.lit(MALFORMED)))
    reason = F.when(n != 3, _fields_reason(n, triple_fields(parser))).otherwise(F.lit(R_EMPTY_FIELD))
    return _row(df, graph, kind, s, p, o, reason)


def parse_names_tsv(lines: DataFrame, graph: bool) -> DataFrame:
    """``key \\t name`` lines (FB15k-237 entity2name.txt)."""
    value = F.col("value")
    df = lines.select("*", F.split(value, "\t", 2).alias("_f"))
    f = F.col("_f")
    key, name = F.trim(F.get(f, 0)), F.trim(F.get(f, 1))
    n = F.size(f)
    kind = (F.when(_is_skip(value), F.lit(SKIP))
            .when((n == 2) & (key != "") & (name != ""), F.lit(NAME))
            .otherwise(F.lit(MALFORMED)))
    reason = F.when(n != 2, _fields_reason(n, NAME_FIELDS)).otherwise(F.lit(R_EMPTY_FIELD))
    return _row(df, graph, kind, key, F.lit(None), name, reason)


_RECORD_SCHEMA = "key string, name string, aliases array<string>, description string"


def parse_entities(lines: DataFrame, graph: bool) -> DataFrame:
    """Entities file: a JSON object per line, or ``key \\t name``; one RECORD row per line."""
    value = F.col("value")
    is_json = F.ltrim(value).startswith("{")
    rec = F.from_json(value, _RECORD_SCHEMA)
    tsv = F.split(value, "\t", 2)
    df = lines.select("*", rec.alias("_r"), tsv.alias("_f"))
    r, f = F.col("_r"), F.col("_f")
    json_ok = r.isNotNull() & (F.coalesce(F.trim(r["key"]), F.lit("")) != "")
    tsv_ok = (F.size(f) == 2) & (F.trim(F.get(f, 0)) != "") & (F.trim(F.get(f, 1)) != "")
    kind = (F.when(_is_skip(value), F.lit(SKIP))
            .when(F.when(is_json, json_ok).otherwise(tsv_ok), F.lit(RECORD))
            .otherwise(F.lit(MALFORMED)))
    reason = F.when(is_json, F.lit(R_BAD_JSON)).when(
        F.size(f) != 2,
        _fields_reason(F.size(f), "a JSON object or 2 tab-separated fields (key, name)"),
    ).otherwise(F.lit(R_EMPTY_FIELD))
    return _row(
        df, graph, kind,
        s=F.when(is_json, F.trim(r["key"])).otherwise(F.trim(F.get(f, 0))),
        p=F.when(is_json, r["description"]),
        o=F.when(is_json, r["name"]).otherwise(F.trim(F.get(f, 1))),
        reason=reason,
        extra=F.when(is_json, r["aliases"]),
    )


# ---- the same rules on the driver, line by line -------------------------------------------------
#: Parsers whose rules are also written below in Python, for a refresh's changed lines
#: (``spark_jobs.ingest_lines``); tests/test_ingest_lines.py holds them equal to the Spark
#: rules above on every fixture, malformed lines included.
LINE_PARSERS = (*TRIPLE_PARSERS, "names_tsv")
_BOM = "\ufeff".encode()


def parse_line(parser: str, raw: bytes) -> tuple[str, str | None, str | None, str | None,
                                                 str | None, str | None]:
    """(kind, s, p, o, reason, text) of one raw line, as ``parse_triples`` /
    ``parse_names_tsv`` and ``_row`` classify it (reason and text: malformed lines only)."""
    if raw.startswith(_BOM):
        raw = raw[len(_BOM):]
    try:
        value, valid = raw.decode("utf-8"), True
    except UnicodeDecodeError:
        value, valid = raw.decode("utf-8", "replace"), False
    if parser == "names_tsv":
        kind, s, p, o, reason = _names_line(value)
    else:
        kind, s, p, o, reason = _triple_line(value, parser)
    if not valid and kind != SKIP:
        kind, reason = MALFORMED, R_INVALID_UTF8
    return (kind, s, p, o, reason, value) if kind == MALFORMED else (kind, s, p, o, None, None)


def _spark_trim(text: str | None) -> str | None:
    """Spark's ``trim``: spaces (U+0020) only."""
    return None if text is None else text.strip(" ")


def _line_skipped(value: str, comments: bool) -> bool:
    stripped = _spark_trim(value)
    return stripped == "" or (comments and stripped.startswith("#"))


def _triple_line(value: str, parser: str):
    separator, _, comments = TRIPLE_PARSERS[parser]
    fields = re.split(separator, value)
    s, p, o = (_spark_trim(fields[i]) if i < len(fields) else None for i in range(3))
    if _line_skipped(value, comments):
        return SKIP, s, p, o, None
    if len(fields) != 3:
        return MALFORMED, s, p, o, fields_reason(triple_fields(parser), len(fields))
    if not (s and p and o):
        return MALFORMED, s, p, o, R_EMPTY_FIELD
    return (TYPE if p in TYPE_PREDICATES else EDGE), s, p, o, None


def _names_line(value: str):
    fields = re.split("\t", value, maxsplit=1)
    key, name = (_spark_trim(fields[i]) if i < len(fields) else None for i in range(2))
    if _line_skipped(value, True):
        return SKIP, key, None, name, None
    if len(fields) != 2:
        return MALFORMED, key, None, name, fields_reason(NAME_FIELDS, len(fields))
    if not (key and name):
        return MALFORMED, key, None, name, R_EMPTY_FIELD
    return NAME, key, None, name, None


def parse_source(spark: SparkSession, source: Source, languages: list[str]) -> DataFrame:
    lines = read_lines(spark, list(source.files))
    if source.parser == "nt":
        return parse_nt(lines, source.graph, languages)
    if source.parser in TRIPLE_PARSERS:
        return parse_triples(lines, source.graph, source.parser)
    if source.parser == "names_tsv":
        return parse_names_tsv(lines, source.graph)
    if source.parser == "entities":
        return parse_entities(lines, source.graph)
    raise FormatError(f"unknown parser {source.parser!r}")


def parse_plan(spark: SparkSession, plan: Plan, languages: list[str]) -> DataFrame:
    """All lines of all sources of a plan, one row each (columns ``PARSED_COLUMNS``)."""
    frames = [parse_source(spark, source, languages) for source in plan.sources]
    out = frames[0]
    for frame in frames[1:]:
        out = out.unionByName(frame)
    return out


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


def unescape_literals(df: DataFrame, python: bool = True, column: str = "o",
                      flag: str = "escaped") -> DataFrame:
    """Unescape N-Triples literal text according to ``flag`` (ESC_*).

    In the JVM (commons-text ``unescapeJava``), except for text with ``\\U`` escapes (beyond the
    BMP), which that method does not know: those rare rows go through a Python function — only
    when ``python`` is set (the caller knows from the line statistics whether any exist).
    """
    jvm = F.expr("java_method('org.apache.commons.text.StringEscapeUtils', 'unescapeJava', "
                 f"`{column}`)")
    code = F.col(flag)
    common = df.withColumn(column, F.when(code == ESC_JVM, jvm).otherwise(F.col(column)))
    if not python:
        return common
    py = F.udf(unescape_nt, StringType())
    rare = df.filter(code == ESC_PYTHON).withColumn(column, py(F.col(column)))
    return common.filter(code != ESC_PYTHON).unionByName(rare)
