"""The dump formats' Spark parsers: every line of a plan's files as one row of
``PARSED_COLUMNS``, with Spark SQL expressions only (regexes run in the JVM).

``read_lines`` keeps, for every line, the file it came from, the start of the file split that
holds it and a per-partition counter, from which ``spark_jobs.ingest`` derives the exact 1-based
line number within the file (a split never shares a line with another split, and lines are
read in file order within a split).
"""

from __future__ import annotations

from pathlib import Path

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StringType

from lokg.spark_jobs.formats import (ALIAS, ALIAS_PREDICATES, ATTRIBUTE, DESCRIPTION,
                                     DESCRIPTION_PREDICATES, EDGE, ESC_JVM, ESC_NONE, ESC_PYTHON,
                                     FILTERED, FREEBASE_NS, MALFORMED, NAME, NAME_FIELDS,
                                     NAME_PREDICATES, RECORD, R_BAD_JSON, R_CONTROL, R_EMPTY_FIELD,
                                     R_EMPTY_IRI, R_GARBAGE, R_INVALID_UTF8, SKIP, TRIPLE_PARSERS,
                                     TYPE, TYPE_PREDICATES, _DIAGNOSES, _FULL, _SEP, FormatError,
                                     Plan, Source, fields_reason, triple_fields, unescape_nt)


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


def _fields_reason(n: Column, expected: str) -> Column:
    return F.concat(F.lit(fields_reason(expected, "")), n.cast("string"))


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
