"""Ingest's rules, once, as DuckDB-dialect SQL over the dump's lines (``spark_jobs.ingest_read``):
the parsers of ``spark_jobs.formats`` (the N-Triples grammar's regexes, the field-separated
formats, entities files), the line kinds, the quarantine reasons, entity and relation ids and
the tables. ``spark_jobs.ingest`` runs them on the build's engine (``spark_jobs.engine``).

The regexes are written once for both engines' regex libraries (RE2 in DuckDB, Java's in
Spark): ``portable`` turns the grammar's patterns into the syntax both read alike. Literal text
with escapes goes through ``formats.unescape_nt`` (the SQL function ``nt_unescape``), only for
the rows that hold a backslash.
"""

from __future__ import annotations

from lokg.spark_jobs import formats as fm
from lokg.spark_jobs.engine import literal, literal_list

#: Kinds of lines whose subject is an entity though they state no edge.
SUBJECT_KINDS = (*fm.LITERAL_KINDS, fm.FILTERED, fm.TYPE)
#: The columns of the table ``parsed``: a line's place, its parser's classification, its text.
PARSED = ("source", "parser", "graph", "file_idx", "line", "hash", "kind", "s", "p", "o",
          "extra", "reason", "text")
#: A fact's place in the dump as one number: file index, then line (< 2⁴⁰ lines per file).
POS = "(CAST(file_idx AS BIGINT) * 1099511627776 + line)"


def portable(pattern: str) -> str:
    """A pattern of ``spark_jobs.formats`` (Java syntax) in the syntax RE2 and Java read alike:
    ``formats.re2``, ``$`` as ``\\z`` and ``.`` matching any character (Java's ``$`` and
    ``.`` otherwise treat U+0085, U+2028 and U+2029 as line ends, RE2's do not)."""
    return "(?s)" + fm.re2(pattern).replace("$", r"\z")


def iri_key(term: str) -> str:
    """``<iri>`` → the Freebase local name or the IRI; a blank node stays as it is."""
    fb = "<" + fm.FREEBASE_NS
    return (f"CASE WHEN starts_with({term}, {literal(fb)}) THEN substr({term}, {len(fb) + 1}, "
            f"length({term}) - {len(fb) + 1}) WHEN starts_with({term}, '<') "
            f"THEN substr({term}, 2, length({term}) - 2) ELSE {term} END")


def _skip(comments: bool = True) -> str:
    """A blank line (Spark's trim: spaces only) or, with ``comments``, a ``#`` comment."""
    blank = "trim(value) = ''"
    return f"({blank} OR starts_with(trim(value), '#'))" if comments else f"({blank})"


def _lang_ok(languages: list[str | None]) -> str:
    """The literal's tag is a configured language (``''``: untagged) or a subtag of one."""
    conds = ["false"]
    for code in languages:
        code = (code or "").lower()
        conds.append(f"lower(lang) = {literal(code)}")
        if code:
            conds.append(f"starts_with(lower(lang), {literal(code + '-')})")
    return "(" + " OR ".join(conds) + ")"


def _nt_kind() -> str:
    named = (*fm.NAME_PREDICATES, *fm.ALIAS_PREDICATES, *fm.DESCRIPTION_PREDICATES)
    return f"""CASE WHEN skip THEN '{fm.SKIP}'
        WHEN NOT valid OR NOT ok OR empty THEN '{fm.MALFORMED}'
        WHEN p0 IN {literal_list(fm.TYPE_PREDICATES)} THEN '{fm.TYPE}'
        WHEN NOT lit THEN '{fm.EDGE}'
        WHEN p0 IN {literal_list(fm.NAME_PREDICATES)} AND keep THEN '{fm.NAME}'
        WHEN p0 IN {literal_list(fm.ALIAS_PREDICATES)} AND keep THEN '{fm.ALIAS}'
        WHEN p0 IN {literal_list(fm.DESCRIPTION_PREDICATES)} AND keep THEN '{fm.DESCRIPTION}'
        WHEN p0 IN {literal_list(named)} THEN '{fm.FILTERED}' ELSE '{fm.ATTRIBUTE}' END"""


def _nt_reason() -> str:
    """Why a malformed N-Triples line was refused: the first diagnosis that matches."""
    whens = "".join(f" WHEN regexp_matches(value, {literal(portable(p))}) THEN {literal(r)}"
                    for p, r in fm._DIAGNOSES)
    return (f"CASE WHEN NOT valid THEN {literal(fm.R_INVALID_UTF8)} WHEN ctl THEN {literal(fm.R_CONTROL)} "
            f"WHEN ok THEN {literal(fm.R_EMPTY_IRI)}{whens} ELSE {literal(fm.R_GARBAGE)} END")


#: The three whitespace-separated pieces of a statement (subject, predicate, the rest): exact
#: once ``formats._FULL`` matched, since a subject or predicate term holds no space or tab.
_PIECES = r"(?s)^[ \t]*([^ \t]+)[ \t]+([^ \t]+)[ \t]+([^ \t].*)\z"
#: The object term at the start of the rest of a statement (an IRI is cut at its ``>``).
_OBJECT = portable(f"^(?:{fm._BNODE}|{fm._LIT})")


def _row(kind: str, s: str, p: str, o: str, reason: str, extra: str = "NULL") -> str:
    """The ``PARSED`` columns of a parser's classification (from a query with ``kind``)."""
    return (f"SELECT source, parser, graph, file_idx, line, hash, {kind} AS kind, {s} AS s, "
            f"{p} AS p, {o} AS o, CAST({extra} AS VARCHAR[]) AS extra, "
            f"CASE WHEN {kind} = '{fm.MALFORMED}' THEN {reason} END AS reason, "
            f"CASE WHEN {kind} = '{fm.MALFORMED}' THEN value END AS text")


def _nt_terms(lines: str) -> str:
    """The lines with ``skip``, ``ctl``, ``ok`` (one statement, no control separator) and
    the terms ``st``, ``pt``, ``ot`` of a statement. The common shape (``<s> <p> o``, single
    spaces) is cut with string functions; the other statements by ``_PIECES``."""
    full = literal(portable(fm._FULL))
    pieces = {i: f"regexp_extract(value, {literal(_PIECES)}, {i})" for i in (1, 2, 3)}
    return f"""WITH m AS (SELECT *, {_skip()} AS skip, contains(value, chr(1)) AS ctl,
                 NOT contains(value, chr(1)) AND regexp_matches(value, {full}) AS ok
               FROM {lines} WHERE parser = 'nt'),
    a AS (SELECT *, CASE WHEN ok AND starts_with(value, '<')
                         THEN substr(value, 1, strpos(value, '>')) END AS st_c FROM m),
    b AS (SELECT *, substr(value, length(st_c) + 2) AS r1 FROM a),
    c AS (SELECT *, substr(r1, 1, strpos(r1, '>')) AS pt_c FROM b),
    d AS (SELECT *, substr(r1, length(pt_c) + 2) AS r2 FROM c),
    e AS (SELECT *, coalesce(substr(value, length(st_c) + 1, 1) = ' ' AND starts_with(r1, '<')
                    AND substr(r1, length(pt_c) + 1, 1) = ' '
                    AND NOT (starts_with(r2, ' ') OR starts_with(r2, chr(9))), false) AS common
          FROM d),
    t AS (SELECT *, CASE WHEN common THEN st_c WHEN ok THEN {pieces[1]} END AS st,
                 CASE WHEN common THEN pt_c WHEN ok THEN {pieces[2]} END AS pt,
                 CASE WHEN common THEN r2 WHEN ok THEN {pieces[3]} END AS rest FROM e)
    SELECT *, CASE WHEN starts_with(rest, '<') THEN substr(rest, 1, strpos(rest, '>'))
                   ELSE regexp_extract(rest, {literal(_OBJECT)}, 0) END AS ot FROM t"""


def parse_nt(lines: str, languages: list[str | None]) -> str:
    """N-Triples lines: edge, type, name/alias/description/filtered, attribute or malformed;
    a fact's s, p, o (o: a literal's text, unescaped where a fact uses it), else nulls."""
    fact = f"kind0 NOT IN ('{fm.SKIP}', '{fm.MALFORMED}')"
    o = (f"CASE WHEN NOT {fact} THEN NULL WHEN kind0 IN {literal_list(SUBJECT_KINDS)} AND lit "
         "AND contains(o0, '\\') THEN nt_unescape(o0) ELSE o0 END")
    row = _row("kind0", f"CASE WHEN {fact} THEN s0 END", f"CASE WHEN {fact} THEN p0 END", o,
               _nt_reason())
    suffix = literal(r'"([^"]*)\z')  # a literal's suffix: what follows its last quote
    return f"""WITH terms AS ({_nt_terms(lines)}),
    u AS (SELECT *, starts_with(ot, '"') AS lit, CASE WHEN starts_with(ot, '"')
                    THEN regexp_extract(ot, {suffix}, 1) END AS suffix FROM terms),
    f AS (SELECT *, {iri_key('st')} AS s0, {iri_key('pt')} AS p0,
                 CASE WHEN lit THEN substr(ot, 2, length(ot) - length(suffix) - 2)
                      ELSE {iri_key('ot')} END AS o0,
                 (st = '<>' OR pt = '<>' OR ot = '<>') AS empty FROM u),
    g AS (SELECT *, CASE WHEN starts_with(suffix, '@') THEN substr(suffix, 2) ELSE '' END
                    AS lang FROM f),
    h AS (SELECT *, {_nt_kind()} AS kind0 FROM (SELECT *, {_lang_ok(languages)} AS keep FROM g))
    {row} FROM h"""


def _field(i: int, char: str, sep: str) -> str:
    """The ``i``-th (0-based) ``sep``-separated field of ``value``, trimmed (``char``: the
    separator inside a character class)."""
    return (f"trim(regexp_extract(value, {literal(f'^(?:[^{char}]*{sep}){{{i}}}([^{char}]*)')}, 1))"
            if i else f"trim(regexp_extract(value, {literal(f'^([^{char}]*)')}, 1))")


def _fields_reason(expected: str) -> str:
    return f"{literal(fm.fields_reason(expected, ''))} || CAST(n AS VARCHAR)"


def parse_triples(lines: str, parser: str) -> str:
    """``s \\t r \\t o`` lines (``triples_psv``: ``s|r|o``): anything but exactly three
    non-empty fields is malformed; a type predicate makes a type assertion, not an edge."""
    separator, _, comments = fm.TRIPLE_PARSERS[parser]
    char, text = (r"\t", "chr(9)") if separator == "\t" else ("|", "'|'")
    sep = r"\t" if separator == "\t" else r"\|"
    fields = ", ".join(f"CASE WHEN n > {i} THEN {_field(i, char, sep)} END AS f{i}"
                       for i in range(3))
    kind = (f"CASE WHEN {_skip(comments)} THEN '{fm.SKIP}' WHEN NOT valid THEN '{fm.MALFORMED}' "
            "WHEN n = 3 AND f0 <> '' AND f1 <> '' AND f2 <> '' THEN CASE WHEN f1 IN "
            f"{literal_list(fm.TYPE_PREDICATES)} THEN '{fm.TYPE}' ELSE '{fm.EDGE}' END "
            f"ELSE '{fm.MALFORMED}' END")
    reason = (f"CASE WHEN NOT valid THEN {literal(fm.R_INVALID_UTF8)} WHEN n <> 3 THEN "
              f"{_fields_reason(fm.triple_fields(parser))} ELSE {literal(fm.R_EMPTY_FIELD)} END")
    return f"""WITH a AS (SELECT *, length(value) - length(replace(value, {text}, '')) + 1 AS n
               FROM {lines} WHERE parser = {literal(parser)}),
    b AS (SELECT *, {fields} FROM a), c AS (SELECT *, {kind} AS kind0 FROM b)
    {_row("kind0", "f0", "f1", "f2", reason)} FROM c"""


def _key_name() -> str:
    """``key \\t name`` split at the first tab: ``n`` fields (1 or 2), ``k`` and ``v``."""
    key, name = _field(0, r"\t", ""), literal(r"(?s)^[^\t]*\t(.*)")
    return (f"CASE WHEN contains(value, chr(9)) THEN 2 ELSE 1 END AS n, {key} AS k, "
            f"CASE WHEN contains(value, chr(9)) THEN trim(regexp_extract(value, {name}, 1)) "
            "END AS v")


def parse_names(lines: str) -> str:
    """``key \\t name`` lines (FB15k-237's entity2name.txt): a name of the key."""
    kind = (f"CASE WHEN {_skip()} THEN '{fm.SKIP}' WHEN NOT valid THEN '{fm.MALFORMED}' "
            f"WHEN n = 2 AND k <> '' AND v <> '' THEN '{fm.NAME}' ELSE '{fm.MALFORMED}' END")
    reason = (f"CASE WHEN NOT valid THEN {literal(fm.R_INVALID_UTF8)} WHEN n <> 2 THEN "
              f"{_fields_reason(fm.NAME_FIELDS)} ELSE {literal(fm.R_EMPTY_FIELD)} END")
    return f"""WITH a AS (SELECT *, {_key_name()} FROM {lines} WHERE parser = 'names_tsv'),
    c AS (SELECT *, {kind} AS kind0 FROM a)
    {_row("kind0", "k", "NULL", "v", reason)} FROM c"""


def parse_entities(lines: str) -> str:
    """An entities file: a JSON object per line (decoded by ``ingest_read``) or ``key \\t
    name``; a record row per line (s key, o name, p description, extra aliases)."""
    json_ok = "coalesce(j_ok AND trim(j_key) <> '', false)"
    kind = (f"CASE WHEN {_skip()} THEN '{fm.SKIP}' WHEN NOT valid THEN '{fm.MALFORMED}' "
            f"WHEN CASE WHEN js THEN {json_ok} ELSE n = 2 AND k <> '' AND v <> '' END "
            f"THEN '{fm.RECORD}' ELSE '{fm.MALFORMED}' END")
    expected = "a JSON object or 2 tab-separated fields (key, name)"
    reason = (f"CASE WHEN NOT valid THEN {literal(fm.R_INVALID_UTF8)} WHEN js THEN {literal(fm.R_BAD_JSON)} "
              f"WHEN n <> 2 THEN {_fields_reason(expected)} ELSE {literal(fm.R_EMPTY_FIELD)} END")
    return f"""WITH a AS (SELECT *, starts_with(ltrim(value), '{{') AS js, {_key_name()}
               FROM {lines} WHERE parser = 'entities'),
    c AS (SELECT *, {kind} AS kind0 FROM a)
    {_row("kind0", "CASE WHEN js THEN trim(j_key) ELSE k END",
          "CASE WHEN js THEN j_description END", "CASE WHEN js THEN j_name ELSE v END",
          reason, "CASE WHEN js THEN j_aliases END")} FROM c"""


def parse(lines: str, parsers: list[str], languages: list[str | None]) -> str:
    """Every line of the table ``lines`` (``ingest_read.LINE_SCHEMA``) classified by its
    parser, as rows of ``PARSED``."""
    queries = {"nt": lambda: parse_nt(lines, languages), "names_tsv": lambda: parse_names(lines),
               "entities": lambda: parse_entities(lines)}
    parts = [queries[p]() if p in queries else parse_triples(lines, p) for p in parsers]
    return " UNION ALL ".join(f"SELECT * FROM ({part})" for part in parts)


def from_store(lines: str, store: str) -> str:
    """The ``PARSED`` rows of the lines a line store (``dump_lines``) holds, by parser and
    hash of the line's bytes."""
    return (f"SELECT l.source, l.parser, l.graph, l.file_idx, l.line, l.hash, st.kind, st.s, "
            f"st.p, st.o, CAST(NULL AS VARCHAR[]) AS extra, st.reason, st.text FROM {lines} l "
            f"JOIN {store} st ON l.parser = st.parser AND l.hash = st.hash")
