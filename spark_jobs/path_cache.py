"""Stage ``path_cache``: the top TAIMR paths of every head, precomputed, as SQL run by the build's
engine (``spark_jobs.engine``: DuckDB on one node, multi-threaded and spilling past
``build.memory_gb``; Spark SQL on a cluster) — one definition for both.

Inputs: ``edges`` (gat: canonical triples plus inverses with their attention),
``node_gain`` and ``entities``. Nothing else — the paths are built from the graph alone, never
from questions or answers (the stage does not look at the ``dump``). A query log
(``heads: query_log``) only chooses which heads are searched now rather than at query time, and
only its linked entity keys are read: a cold head gets the same paths, so the choice changes
latency, never an answer.

Heads (``spark_jobs.path_cache_heads``) are every entity with an out-edge
(``path_cache.heads: all``) or a hot set:

* ``degree`` | ``mu`` | ``query_log``: the top heads — entities with an out-edge — by out-degree
  in ``edges`` (inverses included: the first hops the search can take), by μ (``node_gain``), or
  by the number of logged answers that linked them (``path_cache.query_log``: JSON lines with
  ``linked[].key``, the Answer JSON, or ``details.linked[].key``, ``lokg eval``'s
  predictions.jsonl; a key counts once per answer; keys of other builds' entities are dropped
  and counted; a log without one such line is a StageError); ties go to the smaller entity id,
  so the set is deterministic. Its size is ``hot_share`` of all heads (rounded up) or
  ``hot_count`` (at most all heads).
* a file of entity keys, one a line (blank lines skipped; an unknown key is a StageError naming
  the file and line).

Heads outside the hot set are cold: the runtime computes their paths at query time with
``runtime.taimr.top_paths`` (runtime/query.py ``Runtime.paths``), keeping the last few in an LRU.

The search is taimr's, hop by hop in SQL, with its settings (max_hops, k_top, beam_width,
lambda_topo): table ``weighted`` gives each edge its weight w = log α + λ·log μ(target) (numpy's
log through an engine function, so the bits are taimr's) and its position among its source's
out-edges (best weight first, ties by target, relation, direction). Beam 1 is the best
``beam_width`` out-edges of each head per group (head, first relation, first direction); beam h
the best ``beam_width`` fresh children (a node not yet on the path) of beam h−1 per group,
ranked by score and then in the order taimr generates them (a parent's first
``beam_width`` + h out-edges before the rest, parent by rank, edge by position), so ties at a
cut fall as taimr's do. Path scores are sums in hop order, as taimr adds them. The last hop's
children and the beams' rows are ranked per group by score, ties by nodes, relations and
directions (a path before its extensions), and the best ``k_top`` kept. Children that cannot
enter a group's cut (scoring under a lower bound of it, or behind enough better siblings) are
never generated, nor any child of a parent whose best out-edge cannot reach that bound. With
max_hops ≥ 4 taimr keeps the beam of a head whose groups all fit in generation order rather
than by score, so a tie at a later cut may fall otherwise there.

Output ``path_cache/bucket-00000.parquet`` … ``bucket-<buckets-1>.parquet``: the rows of the
heads with ``head % buckets == b``, sorted by (head, relations[0], inverses[0], rank), exactly
the contract columns (runtime/path_cache.py reads a head's rows from its bucket). Every bucket
file exists, empty or not, so a reader can trust the count (``report["buckets"]``). The engine
writes all rows sorted by (bucket, head, …); the stage cuts them into the bucket files, one
bucket in memory at a time.

Refresh (``previous:`` inputs: same code and settings, changed inputs; pipeline/refresh.py).
A head's rows are a function of the out-edges (their α, and μ of their targets) of the nodes
within ``max_hops`` − 1 hops of it — the search extends no path further — and of the order of
the node ids (ties). Entity ids are ranks in key order, so when entities come or go every id
above them shifts, but the order of the kept ones stays: the stage moves the previous build's
ids to this build's by key (a translation that reorders ids: full) and, when every entity with
an out-edge is a head (``heads: all``), compares the two builds' weighted edges in this build's
ids: a node is **changed** when one of its out-edges was added, removed (a node gone removes
its edges, and the inverse edges of its neighbours), or got another α or another μ at its
target. Relation ids are compared as they are: a renumbered relation shows as changed edges,
searched anew. The heads within ``max_hops`` − 1 hops of a changed node (walked back along the
new graph's edges, which hold their inverses) are searched anew — the same search, its heads
filtered — and every other head's rows are copied from the previous build's cache with their
head and nodes in this build's ids, into the bucket of the new head id: the cache then equals a
full run's, bucket for bucket, row for row. A warm-started or retrained GAT moves α on nearly
every edge, so after one the whole cache is usually recomputed; the copy pays off when α moves
only near the change (``gat.uniform``). More than ``common.stage.PARTIAL_MAX_SHARE`` of the
heads touched, or a hot set: full. The report's ``refresh`` says which (partial: heads
searched, copied, and how many entity ids moved).

Report: engine, heads, heads_all (entities with an out-edge), heads_share (heads / heads_all),
head_source (in words: how the heads were chosen), hot_set (selector, share, count, requested,
and for a query log its answers and unknown keys), heads_with_paths, paths, mean_paths_per_head,
paths_by_hops, buckets, refresh (full and why, or partial: heads searched and copied), bytes (of
the bucket files), the search settings, step seconds.
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from lokg.common.stage import PARTIAL_MAX_SHARE, Laps, StageError, previous_inputs, stage_input
from lokg.runtime.contract import TABLE_SCHEMAS, check_schema, table_files, write_table
from lokg.spark_jobs.engine import Engine, open_engine, parquet_files
from lokg.spark_jobs.path_cache_heads import select_heads
from lokg.spark_jobs.settings import PathCacheSettings

SEARCH_KEYS = ("max_hops", "k_top", "beam_width")
BUCKET_FILE = "bucket-{:05d}.parquet"


def settings(config: Mapping) -> dict:
    cfg = PathCacheSettings.of(config, StageError)
    return {**cfg, "lambda_topo": float(cfg.lambda_topo)}  # the report records a float


def bucket_path(cache_dir: Path, bucket: int) -> Path:
    return cache_dir / BUCKET_FILE.format(bucket)


def run(config: Mapping, inputs: Mapping[str, str], out_dir: str) -> dict:
    lap = Laps()
    cfg = settings(config)
    paths = _inputs(inputs)
    cache_dir = Path(out_dir) / "path_cache"
    cache_dir.parent.mkdir(parents=True, exist_ok=True)
    previous = previous_inputs(inputs, "edges", "node_gain", "entities", "path_cache")
    with open_engine(dict(config), Path(out_dir)) as engine:
        for name, path in paths.items():
            engine.register(name, path)
        _weighted(engine, cfg["lambda_topo"])
        chosen, heads_all = select_heads(engine, cfg)
        n_heads = int(engine.fetch("SELECT count(*) AS n FROM heads").column("n")[0].as_py())
        lap("heads")
        refresh = _refresh(engine, cfg, previous, heads_all)
        lap("refresh")
        partial = refresh["mode"] == "partial"
        engine.view("found", _found_sql(engine, cfg, partial), materialise=True)
        lap("search")
        _write_buckets(engine, cache_dir, cfg["buckets"], cfg["max_hops"])
        lap("write")
        written = _written(engine, cache_dir, cfg["buckets"], n_heads)
        name = engine.name
    report = {
        "engine": name,
        "heads": n_heads,
        "heads_all": heads_all,
        "heads_share": round(n_heads / heads_all, 6) if heads_all else 0.0,
        **chosen,
        **written,
        "buckets": cfg["buckets"],
        "bucket_file": BUCKET_FILE,
        "refresh": refresh,
        **{k: cfg[k] for k in (*SEARCH_KEYS, "lambda_topo")},
        "step_seconds": lap.seconds,
        "seconds": round(sum(lap.seconds.values()), 3),
    }
    return {"outputs": {"path_cache": str(cache_dir)}, "report": report}


def _inputs(inputs: Mapping[str, str]) -> dict[str, Path]:
    """The stage's input tables by name; StageError for one missing or of another schema."""
    paths = {n: stage_input(inputs, "path_cache", n) for n in ("edges", "node_gain", "entities")}
    for table in ("edges", "node_gain"):
        first = table_files(paths[table])[0]
        check_schema(table, pq.read_schema(first), first)
    return paths


# ============================================================================================
# the weighted graph


def _weighted(engine: Engine, lambda_topo: float) -> None:
    """Table ``weighted``: every edge with its weight w = log α + λ·log μ(o) (numpy's log, as
    runtime.taimr computes it: the same bits) and its position p among its source's out-edges
    (best weight first, ties by target, relation, direction); table ``best``: each source's
    best weight. StageError for ids outside ``node_gain`` or α, μ outside [0, ∞)."""
    engine.function("path_log", np.log, ["DOUBLE"], "DOUBLE", vectorised=True)
    bad = engine.fetch(
        "SELECT sum(CASE WHEN g.id IS NULL THEN 1 ELSE 0 END) AS outside, "
        "sum(CASE WHEN e.attention >= 0 AND e.attention < CAST('inf' AS DOUBLE) THEN 0 ELSE 1 END)"
        " AS alpha, sum(CASE WHEN g.mu > 0 AND g.mu < CAST('inf' AS DOUBLE) THEN 0 ELSE 1 END) "
        "AS mu FROM edges e LEFT JOIN node_gain g ON g.id = e.o").to_pylist()[0]
    if bad["outside"] or bad["alpha"] or bad["mu"]:
        raise StageError(f"path_cache: edges and node_gain disagree: {bad['outside'] or 0} edges "
                         f"end outside node_gain's ids, {bad['alpha'] or 0} have an attention "
                         f"outside [0, inf), {bad['mu'] or 0} end at a mu outside (0, inf)")
    engine.view("weighted", f"""
        SELECT s, r, o, inverse, w,
               row_number() OVER (PARTITION BY s ORDER BY w DESC, o, r, inverse) - 1 AS p
        FROM (SELECT e.s, e.r, e.o, e.inverse,
                     path_log(CAST(e.attention AS DOUBLE))
                     + CAST('{lambda_topo!r}' AS DOUBLE) * path_log(CAST(g.mu AS DOUBLE)) AS w
              FROM edges e JOIN node_gain g ON g.id = e.o) x""", materialise=True)
    engine.view("best", "SELECT s, max(w) AS best FROM weighted GROUP BY s", materialise=True)


# ============================================================================================
# the beam search, hop by hop


def _hops(h: int, prefix: str = "", upto: int | None = None) -> str:
    """The hop columns of an h-hop path (n1..nh, r1..rh, i1..ih), NULL-padded to ``upto``."""
    upto = upto or h
    typed = {"n": "BIGINT", "r": "BIGINT", "i": "BOOLEAN"}
    return ", ".join(f"{prefix}{c}{j}" if j <= h else f"CAST(NULL AS {typed[c]}) AS {c}{j}"
                     for c in "nri" for j in range(1, upto + 1))


def _fresh(h: int) -> str:
    """An edge e out of a parent b of h−1 hops reaches a node not yet on b's path."""
    return " AND ".join(["e.o <> b.head", *(f"e.o <> b.n{j}" for j in range(1, h))])


def _child(h: int) -> str:
    """The columns of an h-hop child: its parent b's path extended by the edge e."""
    edge = {"n": "e.o", "r": "e.r", "i": "e.inverse"}
    hops = ", ".join(f"b.{c}{j}" if j < h else f"{edge[c]} AS {c}{j}"
                     for c in "nri" for j in range(1, h + 1))
    return f"b.head, b.score + e.w AS score, {hops}"


def _first_hop(engine: Engine, cfg: Mapping) -> None:
    """Beam 1: per group (head, r1, i1) the ``beam_width`` best edges out of the head (ties:
    the smaller position p), all of them when this is the last hop; ``ord``: rank in group."""
    keep = f"WHERE ord < {cfg['beam_width']}" if cfg["max_hops"] > 1 else ""
    engine.view("beam1", f"""
        SELECT * FROM (
            SELECT h.head, e.w AS score, e.o AS n1, e.r AS r1, e.inverse AS i1,
                   row_number() OVER (PARTITION BY h.head, e.r, e.inverse
                                      ORDER BY e.w DESC, e.p) - 1 AS ord
            FROM search_heads h JOIN weighted e ON e.s = h.head WHERE e.o <> h.head) x
        {keep}""", materialise=True)


def _children(engine: Engine, h: int, wanted: int, cut: str) -> str:
    """SQL of the children of beam h−1 that can enter their group's best ``wanted``: along
    each parent's first wanted + h out-edges, and along the rest only for a parent with fewer
    than ``wanted`` fresh children among those (a child behind ``wanted`` better siblings never
    enters); none scoring under the group's ``cut`` (a table of lower bounds: a child scoring
    less has ``wanted`` better ones), and none of a parent whose best out-edge (table ``best``)
    scores under it. Columns: the path's, parent (its ``ord``), p, and flag (beyond the first
    out-edges: runtime.taimr generates those children last)."""
    cap = wanted + h
    child = f"{_child(h)}, b.ord AS parent, e.p, e.p >= {cap} AS flag"
    engine.view(f"parents{h}", f"""
        SELECT b.*, c.cut FROM beam{h - 1} b JOIN best t ON t.s = b.n{h - 1}
        LEFT JOIN {cut} c ON c.head = b.head AND c.r1 = b.r1 AND c.i1 = b.i1
        WHERE c.cut IS NULL OR b.score + t.best >= c.cut""", materialise=True)
    passes = "(b.cut IS NULL OR b.score + e.w >= b.cut)"
    engine.view(f"short{h}", f"""
        SELECT b.* FROM parents{h} b
        JOIN weighted e ON e.s = b.n{h - 1} AND e.p = {cap} AND {passes}
        LEFT JOIN ({_stale(h, cap)}) k
            ON k.head = b.head AND k.r1 = b.r1 AND k.i1 = b.i1 AND k.ord = b.ord
        WHERE coalesce(k.c, 0) > {h}""")
    return (f"SELECT {child} FROM parents{h} b JOIN weighted e ON e.s = b.n{h - 1} "
            f"AND e.p < {cap} WHERE {_fresh(h)} AND {passes} UNION ALL "
            f"SELECT {child} FROM short{h} b JOIN weighted e "
            f"ON e.s = b.n{h - 1} AND e.p >= {cap} WHERE {_fresh(h)} AND {passes}")


def _stale(h: int, cap: int) -> str:
    """SQL of (head, r1, i1, ord, c): per parent in ``parents<h>``, its first ``cap``
    out-edges that reach a node on its path (not fresh; the path's nodes are distinct, so an
    edge meets one at most). Where the parent's edge at position ``cap`` passes the cut, so do
    all before it (positions rank by weight), and it has fewer than ``cap`` − h fresh
    children there exactly when c > h."""
    nodes = ["b.head", *(f"b.n{j}" for j in range(1, h))]
    joins = " UNION ALL ".join(
        f"SELECT b.head, b.r1, b.i1, b.ord FROM parents{h} b JOIN weighted e "
        f"ON e.s = b.n{h - 1} AND e.o = {node} WHERE e.p < {cap}" for node in nodes)
    return f"SELECT head, r1, i1, ord, count(*) AS c FROM ({joins}) x GROUP BY head, r1, i1, ord"


def _next_hop(engine: Engine, cfg: Mapping, h: int) -> None:
    """Beam h (1 < h < max_hops): per group the ``beam_width`` best children of beam h−1 by
    (score, then the order runtime.taimr generates them in: a parent's first beam_width + h
    out-edges before the rest, parent by rank, edge by position); ``ord``: rank in group."""
    wanted = cfg["beam_width"]
    _sample_cut(engine, h, wanted)
    engine.view(f"beam{h}", f"""
        SELECT head, score, {_hops(h)}, ord FROM (
            SELECT *, row_number() OVER (PARTITION BY head, r1, i1
                                         ORDER BY score DESC, flag, parent, p) - 1 AS ord
            FROM ({_children(engine, h, wanted, f"cut{h}")}) u) x
        WHERE ord < {wanted}""", materialise=True)


def _sample_cut(engine: Engine, h: int, wanted: int) -> None:
    """Table ``cut<h>``: per group, the ``wanted``-th best score among the children of beam
    h−1 along each parent's first out-edges (two, or for a group of n > 1 parents those at
    positions p with p·n < ``wanted`` + n: about ``wanted`` + n of them) — a lower bound of the
    group's cut (a child scoring under it has ``wanted`` better ones), so those children need
    not be generated."""
    engine.view(f"cut{h}", f"""
        SELECT head, r1, i1, score AS cut FROM (
            SELECT b.head, b.r1, b.i1, b.score + e.w AS score,
                   row_number() OVER (PARTITION BY b.head, b.r1, b.i1
                                      ORDER BY b.score + e.w DESC) AS k
            FROM (SELECT *, count(*) OVER (PARTITION BY head, r1, i1) AS n
                  FROM beam{h - 1}) b
            JOIN weighted e ON e.s = b.n{h - 1} AND e.p < {wanted + 1}
            WHERE (e.p < 2 OR (b.n > 1 AND e.p * b.n < {wanted} + b.n)) AND {_fresh(h)}) x
        WHERE k = {wanted}""", materialise=True)


def _candidates(engine: Engine, cfg: Mapping) -> str:
    """SQL of every path the final ranking needs: per group, the rows of each beam scoring
    at least that beam's k_top-th best (a beam's ``ord`` ranks by score first; a row scoring
    less has k_top better paths), and the last hop's children of beam L−1 scoring at least
    the best of those bounds."""
    top, k_top = cfg["max_hops"], cfg["k_top"]
    if top == 1:
        return "SELECT head, score, n1, r1, i1, 1 AS hops FROM beam1"
    kth = " UNION ALL ".join(f"SELECT head, r1, i1, score FROM beam{h} WHERE ord = {k_top - 1}"
                             for h in range(1, top))
    engine.view("kth", f"SELECT head, r1, i1, max(score) AS cut FROM ({kth}) k "
                "GROUP BY head, r1, i1", materialise=True)
    beams = " UNION ALL ".join(
        f"SELECT b.head, b.score, {_hops(h, 'b.', upto=top)}, {h} AS hops FROM beam{h} b "
        f"LEFT JOIN kth c ON c.head = b.head AND c.r1 = b.r1 AND c.i1 = b.i1 "
        f"WHERE c.cut IS NULL OR b.score >= c.cut" for h in range(1, top))
    last = _children(engine, top, k_top, "kth")
    return f"{beams} UNION ALL SELECT head, score, {_hops(top)}, {top} AS hops FROM ({last}) l"


def _searched_sql(engine: Engine, cfg: Mapping) -> str:
    """SQL of the searched heads' rows (head, rank, score, hops, hop columns): per group the
    k_top best candidates by score, ties by nodes, then relations, then directions (a shorter
    path before its extensions), as runtime.taimr.top_paths ranks them."""
    _first_hop(engine, cfg)
    for h in range(2, cfg["max_hops"]):
        _next_hop(engine, cfg, h)
    top = cfg["max_hops"]
    ties = ", ".join([*(f"coalesce(n{j}, -1)" for j in range(1, top + 1)),
                      *(f"coalesce(r{j}, -1)" for j in range(1, top + 1)),
                      *(f"coalesce(i{j}, false)" for j in range(1, top + 1))])
    return f"""SELECT head, rank, score, hops, {_hops(top)} FROM (
                   SELECT *, row_number() OVER (PARTITION BY head, r1, i1
                                                ORDER BY score DESC, {ties}) - 1 AS rank
                   FROM ({_candidates(engine, cfg)}) c) x
               WHERE rank < {cfg['k_top']}"""


def _found_sql(engine: Engine, cfg: Mapping, partial: bool) -> str:
    """SQL of every row of the cache, flat: the searched heads' (``search_heads``) and, in a
    partial refresh, the previous cache's rows of every other head (``copied``)."""
    searched = _searched_sql(engine, cfg)
    return f"{searched} UNION ALL SELECT * FROM copied" if partial else searched


# ============================================================================================
# refresh: search only the heads near a change, copy the others' rows


def _refresh(engine: Engine, cfg: Mapping, previous: dict | None, heads_all: int) -> dict:
    """Table ``search_heads`` (the heads searched now) and, for a partial refresh, ``copied``;
    returns the report's ``refresh``."""
    engine.view("search_heads", "SELECT head FROM heads")
    if previous is None:
        return {"mode": "full", "reason": "no previous build"}
    if cfg["heads"] != "all":
        return {"mode": "full", "reason": "a hot set (heads: all only)"}
    for name in ("edges", "node_gain", "entities", "path_cache"):
        engine.register(f"prev_{name}", previous[name])
    engine.view("moved", "SELECT p.id AS old, n.id AS new FROM prev_entities p "
                "LEFT JOIN entities n ON n.key = p.key", materialise=True)
    disorder = engine.fetch("SELECT count(*) AS n FROM (SELECT new, lag(new) OVER (ORDER BY old) "
                            "AS before FROM moved WHERE new IS NOT NULL) x WHERE new <= before")
    if disorder.column("n")[0].as_py():
        return {"mode": "full", "reason": "entity ids in another order"}
    _touched(engine, cfg["max_hops"] - 1)
    touched = int(engine.fetch("SELECT count(*) AS n FROM touched").column("n")[0].as_py())
    if touched > PARTIAL_MAX_SHARE * heads_all:
        return {"mode": "full", "reason": f"{touched:,} of {heads_all:,} heads touched "
                f"(more than {PARTIAL_MAX_SHARE:.0%})"}
    engine.view("search_heads", "SELECT head FROM heads WHERE head IN (SELECT node FROM touched)")
    engine.view("copied", _copied_sql(cfg["max_hops"]))
    ids_moved = engine.fetch("SELECT count(*) AS n FROM moved WHERE new <> old").column("n")[0]
    return {"mode": "partial", "searched": touched, "copied": heads_all - touched,
            "ids_moved": int(ids_moved.as_py())}


def _touched(engine: Engine, hops: int) -> None:
    """Table ``touched``: the heads within ``hops`` hops (walked back along this build's
    edges) of a node whose weighted out-edges (α, and μ of the target) differ between the two
    builds, the previous build's in this build's ids (-1: gone)."""
    now = ("SELECT e.s, e.r, e.inverse, e.o, e.attention, g.mu FROM edges e "
           "JOIN node_gain g ON g.id = e.o")
    then = ("SELECT coalesce(ms.new, -1) AS s, e.r, e.inverse, coalesce(mo.new, -1) AS o, "
            "e.attention, g.mu FROM prev_edges e JOIN prev_node_gain g ON g.id = e.o "
            "LEFT JOIN moved ms ON ms.old = e.s LEFT JOIN moved mo ON mo.old = e.o")
    engine.view("reached0", f"""SELECT DISTINCT s AS node FROM (
        SELECT * FROM ({now} EXCEPT ALL {then}) a UNION ALL
        SELECT * FROM ({then} EXCEPT ALL {now}) b) d WHERE s >= 0""", materialise=True)
    for k in range(1, hops + 1):
        engine.view(f"reached{k}", f"SELECT node FROM reached{k - 1} UNION SELECT e.s AS node "
                    f"FROM edges e JOIN reached{k - 1} r ON e.o = r.node", materialise=True)
    engine.view("touched", f"SELECT node FROM reached{hops} WHERE node IN "
                "(SELECT head FROM degrees)", materialise=True)


def _copied_sql(top: int) -> str:
    """SQL of the previous cache's rows of every head not searched now, flat, in this build's
    ids (a head, or a node on a path, that moved gets its new id)."""
    def hop(c: str, j: int) -> str:
        column = {"n": "nodes", "r": "relations", "i": "inverses"}[c]
        return f"CASE WHEN array_length(nodes) >= {j} THEN {column}[{j}] END AS {c}{j}"

    flat = ", ".join(hop(c, j) for c in "nri" for j in range(1, top + 1))
    joins = " ".join(f"LEFT JOIN moved m{j} ON m{j}.old = p.n{j}" for j in range(1, top + 1))
    nodes = ", ".join(f"m{j}.new AS n{j}" for j in range(1, top + 1))
    rest = ", ".join(f"p.{c}{j}" for c in "ri" for j in range(1, top + 1))
    return f"""SELECT mh.new AS head, CAST(p.rank AS BIGINT) AS rank, p.score, p.hops, {nodes},
                      {rest}
               FROM (SELECT head, rank, score, array_length(nodes) AS hops, {flat}
                     FROM prev_path_cache) p
               JOIN moved mh ON mh.old = p.head {joins}
               WHERE mh.new IS NOT NULL AND mh.new NOT IN (SELECT node FROM touched)"""


# ============================================================================================
# the bucket files


def _lists(top: int) -> str:
    """The flat hop columns as the contract's list columns (relations, inverses, nodes)."""
    def column(c: str, name: str) -> str:
        cases = " ".join(f"WHEN {h} THEN [{', '.join(f'{c}{j}' for j in range(1, h + 1))}]"
                         for h in range(1, top + 1))
        return f"CASE hops {cases} END AS {name}"

    return ", ".join(column(c, name) for c, name in
                     (("r", "relations"), ("i", "inverses"), ("n", "nodes")))


def _write_buckets(engine: Engine, cache_dir: Path, buckets: int, top: int) -> None:
    """Bucket b (``bucket-<b>.parquet``): the rows of the heads with head % buckets == b, by
    (head, first relation, first direction, rank); every bucket file exists, empty or not.
    The engine writes all rows in that order; they are then cut into the buckets, one at a
    time (a bucket in memory, not the cache)."""
    sorted_dir = cache_dir.with_name("_path_cache-sorted")
    engine.write(f"SELECT head % {buckets} AS bucket, head, CAST(rank AS INTEGER) AS rank, "
                 f"score, r1, i1, {_lists(top)} FROM found", sorted_dir,
                 order_by=["bucket", "head", "r1", "i1", "rank"], single_file=False)
    cache_dir.mkdir(parents=True, exist_ok=True)
    parts: list[pa.Table] = []
    current = 0
    for batch in _batches(sorted_dir):
        bucket = batch.column("bucket").to_numpy()
        for b in np.unique(bucket):  # sorted: the batch's buckets in order
            if b != current and parts:
                write_table("path_cache", pa.concat_tables(parts), bucket_path(cache_dir, current))
                parts = []
            current = int(b)
            parts.append(pa.Table.from_batches([batch.filter(pa.array(bucket == b))]))
    if parts:
        write_table("path_cache", pa.concat_tables(parts), bucket_path(cache_dir, current))
    for b in range(buckets):
        if not bucket_path(cache_dir, b).exists():
            write_table("path_cache", TABLE_SCHEMAS["path_cache"].empty_table(),
                        bucket_path(cache_dir, b))
    shutil.rmtree(sorted_dir, ignore_errors=True)


def _batches(directory: Path):
    """The record batches of the Parquet parts under ``directory``, parts in name order."""
    for f in parquet_files(directory):
        yield from pq.ParquetFile(f).iter_batches(batch_size=1 << 16)


def _written(engine: Engine, cache_dir: Path, buckets: int, n_heads: int) -> dict:
    """The report's figures of what the buckets hold."""
    hops = engine.fetch("SELECT hops, count(*) AS n FROM found GROUP BY hops ORDER BY hops")
    with_paths = engine.fetch("SELECT count(DISTINCT head) AS n FROM found").column("n")[0]
    n_paths = sum(hops.column("n").to_pylist())
    return {
        "heads_with_paths": int(with_paths.as_py()),
        "paths": n_paths,
        "mean_paths_per_head": round(n_paths / n_heads, 3) if n_heads else 0.0,
        "paths_by_hops": {str(h): n for h, n in zip(hops.column("hops").to_pylist(),
                                                    hops.column("n").to_pylist())},
        "bytes": sum(bucket_path(cache_dir, b).stat().st_size for b in range(buckets)),
    }
