"""Scale of relation_stats: a 20,000-relation vocabulary, and a 10⁷-triple dump.

    python -m bench.relation_stats_scale vocab          # 20,000 relations, 2·10⁶ triples drawn
    python -m bench.relation_stats_scale vocab --relations 2000 --triples 200000 --with-transe
    python -m bench.relation_stats_scale synth          # 10⁷ triples: ingest, types, stats
    python -m bench.relation_stats_scale synth --dump /data/synth-1e7 --json rs.jsonl

``vocab`` writes contract tables (entities, relations, triples) straight from numpy — no dump,
no ingest — and runs ``spark_jobs.relation_stats.run`` on them. The vocabulary is shaped like a
Freebase schema, seeded by ``--seed``:

* relation sizes are Zipf-like (exponent 1, every relation has at least one triple);
* every relation has a domain and a range type, drawn Zipf-like over ``--types`` types, so some
  type pairs are shared by hundreds of relations (the ``max_relations_per_type_pair`` cap);
* entities are split evenly over the types and 10 % carry a second type; within its type an
  entity is picked with probability ∝ 1/(rank + 1), so hub entities exist (the
  ``max_relations_per_entity`` cap).

It reports the candidate pairs (rows of ``relation_pairs``), their share of |R|(|R|−1)/2, the
rows of the entity self-join (Σ k_e(k_e−1)/2 over the non-hub entities, k_e = relations touching
entity e: in practice the largest intermediate of the candidate generation; computed here in
numpy) and the stage's time with its sub-steps. ``--with-transe`` adds a random 64-dim relation
embedding, so that the TransE nearest-neighbour generator runs too.

``synth`` generates ``pipeline.synth`` output (no questions; or reuses ``--dump``) and runs
ingest and entity_types through ``pipeline.driver.run_stage``, then relation_stats. transe
is skipped, so relation_stats cannot go through ``run_stage`` (which needs the record of the
stage producing each input it reads): its module's ``run`` is called with the staged outputs
(``staged_outputs``), i.e. exactly the ingest and entity_types outputs. One row per stage.

Measurement: the Spark session (``local[2]``, ``--driver-memory``) is started before the timed
steps, so times exclude JVM start-up (reported separately). Peak memory is the peak resident set
(``VmHWM`` in /proc/<pid>/status) of the Python driver and of the Spark JVM (the process pyspark
launched), each reset through /proc/<pid>/clear_refs before a step: the peak *during* that step,
which includes whatever the process already held (a JVM heap never shrinks much). Python worker
processes are not counted: these inputs need none (ingest calls a Python UDF only for ``\\U``
escapes, which ``pipeline.synth`` never writes).
``--json PATH`` appends one JSON object per run (JSON Lines). Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

from bench.common import (Peaks, bench_config, machine, measured, spark_stages, start_spark,
                          synth_dump)


# ============================================================================================
# measurement


# ============================================================================================
# vocab


def _zipf_weights(n: int) -> np.ndarray:
    w = 1.0 / np.arange(1, n + 1)
    return w / w.sum()


def make_vocabulary(out: Path, n_relations: int, n_triples: int, n_entities: int, n_types: int,
                    seed: int, hub_cap: int) -> dict:
    """Write entities/relations/triples contract tables (see the module doc); return counts."""
    from lokg.runtime.contract import TABLE_SCHEMAS, write_table

    rng = np.random.default_rng(seed)
    sizes = 1 + rng.multinomial(n_triples - n_relations, _zipf_weights(n_relations))
    rng.shuffle(sizes)  # relation ids carry no size order
    domain = rng.choice(n_types, n_relations, p=_zipf_weights(n_types))
    range_ = rng.choice(n_types, n_relations, p=_zipf_weights(n_types))
    bounds = np.linspace(0, n_entities, n_types + 1).astype(np.int64)  # type t owns [b_t, b_t+1)

    def pick(types: np.ndarray) -> np.ndarray:
        """An entity of each type with P(rank k) ∝ 1/(k + 1): floor((n + 1)^u) − 1."""
        n = bounds[types + 1] - bounds[types]
        rank = np.floor((n + 1.0) ** rng.random(len(types))).astype(np.int64) - 1
        return bounds[types] + np.minimum(rank, n - 1)

    r = np.repeat(np.arange(n_relations, dtype=np.int64), sizes)
    s, o = pick(domain[r]), pick(range_[r])
    key = np.unique((s * n_relations + r) * n_entities + o)  # distinct triples, sorted (s, r, o)
    s, r, o = key // (n_relations * n_entities), key // n_entities % n_relations, key % n_entities

    primary = np.searchsorted(bounds, np.arange(n_entities), side="right") - 1
    second = rng.random(n_entities) < 0.10
    extra = (primary + 1 + rng.integers(0, n_types - 1, n_entities)) % n_types  # ≠ primary
    counts = 1 + second.astype(np.int64)
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)
    values = np.empty(offsets[-1], dtype=np.int64)
    values[offsets[:-1]] = primary
    values[offsets[:-1][second] + 1] = extra[second]
    type_names = pa.array([f"type{t:03d}" for t in range(n_types)])
    keys = pa.array([f"e{i}" for i in range(n_entities)])
    schema = TABLE_SCHEMAS["entities"]
    write_table("entities", pa.table({
        "id": np.arange(n_entities), "key": keys, "name": keys,
        "aliases": pa.nulls(n_entities, schema.field("aliases").type),
        "description": pa.nulls(n_entities, pa.string()),
        "types": pa.ListArray.from_arrays(offsets, type_names.take(values)),
        "attributes": pa.nulls(n_entities, schema.field("attributes").type),
    }), out / "entities.parquet")
    write_table("relations", pa.table({
        "id": np.arange(n_relations),
        "name": pa.array([f"rel{i:05d}" for i in range(n_relations)]),
    }), out / "relations.parquet")
    write_table("triples", pa.table({"s": s, "r": r, "o": o}), out / "triples.parquet")
    return {"triples": len(key),
            "entity_self_join_rows": entity_self_join_rows(s, r, o, n_relations, hub_cap)}


def entity_self_join_rows(s: np.ndarray, r: np.ndarray, o: np.ndarray, n_relations: int,
                          cap: int) -> int:
    """Σ k_e(k_e−1)/2 over the entities touching ≤ ``cap`` relations (the non-hub entities)."""
    er = np.unique(np.concatenate([s, o]) * n_relations + np.concatenate([r, r]))
    k = np.bincount(er // n_relations).astype(np.int64)
    k = k[k <= cap]
    return int((k * (k - 1) // 2).sum())


def run_vocab(args) -> dict:
    from lokg.pipeline.config import section
    from lokg.spark_jobs import relation_stats

    config = bench_config(args)
    hub_cap = int(section(config, "relation_stats")["max_relations_per_entity"])
    with tempfile.TemporaryDirectory(prefix="lokg-vocab-bench-", dir=args.workdir) as tmp:
        tables = Path(tmp) / "tables"
        started = time.perf_counter()
        made = make_vocabulary(tables, args.relations, args.triples, args.entities, args.types,
                               args.seed, hub_cap)
        generate_s = round(time.perf_counter() - started, 2)
        inputs = {name: str(tables / f"{name}.parquet")
                  for name in ("entities", "relations", "triples")}
        if args.with_transe:
            emb = np.random.default_rng(args.seed).standard_normal((args.relations, 64), np.float32)
            np.save(tables / "relation_embeddings.npy", emb)
            inputs["relation_embeddings"] = str(tables / "relation_embeddings.npy")
        spark, startup_s = start_spark(config)
        peaks = Peaks(spark)
        out_dir = Path(tmp) / "relation_stats"
        out_dir.mkdir()
        result, seconds, peak = measured(
            peaks, lambda: relation_stats.run(config, inputs, str(out_dir)))
    report = result["report"]
    return {
        "mode": "vocab", "relations": args.relations, "entities": args.entities,
        "types": args.types, "seed": args.seed, "with_transe": args.with_transe,
        "triples": made["triples"],
        "candidate_pairs": report["candidate_pairs"],
        "candidate_pairs_by_source": report["candidate_pairs_by_source"],
        "max_possible_pairs": report["max_possible_pairs"],
        "candidate_share": report["candidate_pairs"] / report["max_possible_pairs"],
        "entity_self_join_rows": made["entity_self_join_rows"],
        "hub_entities_skipped": report["hub_entities_skipped"],
        "hub_type_pairs_skipped": report["hub_type_pairs_skipped"],
        "seconds": seconds, "step_seconds": report["step_seconds"],
        "generate_seconds": generate_s, "spark_startup_seconds": startup_s,
        **peak, "driver_memory": args.driver_memory, **machine(),
    }


def vocab_table(row: dict) -> str:
    steps = ", ".join(f"{k} {v:.0f}" for k, v in row["step_seconds"].items())
    sources = ", ".join(f"{k} {v:,}" for k, v in sorted(row["candidate_pairs_by_source"].items()))
    return "\n".join([
        "| relations | triples | candidate pairs (by source) | share of \\|R\\|(\\|R\\|−1)/2 | "
        "entity self-join rows | seconds (steps) | driver peak | JVM peak |",
        "|--:|--:|--:|--:|--:|--:|--:|--:|",
        f"| {row['relations']:,} | {row['triples']:,} | {row['candidate_pairs']:,} ({sources}) | "
        f"{row['candidate_share']:.2%} | {row['entity_self_join_rows']:,} | "
        f"{row['seconds']:.0f} ({steps}) | {row['driver_peak_mib']:,.0f} MiB | "
        f"{row['jvm_peak_mib']:,.0f} MiB |",
    ])


# ============================================================================================
# synth


def run_synth(args) -> dict:
    config = bench_config(args)
    config["ingest"]["format"] = "synth"
    with tempfile.TemporaryDirectory(prefix="lokg-synth-rs-bench-", dir=args.workdir) as tmp:
        dump, generate_s = synth_dump(args, tmp)
        spark, startup_s = start_spark(config)
        stages, reports, _ = spark_stages(config, dump, Path(tmp) / "store", Peaks(spark))
    report = reports["relation_stats"]
    return {
        "mode": "synth", "dump": str(args.dump) if args.dump else None, "seed": args.seed,
        "triples": reports["ingest"]["triples"], "relations": report["relations"],
        "type_rule": reports["entity_types"]["rule"],
        "candidate_pairs": report["candidate_pairs"], "stages": stages,
        "generate_seconds": generate_s, "spark_startup_seconds": startup_s,
        "driver_memory": args.driver_memory, **machine(),
    }


def synth_table(row: dict) -> str:
    lines = ["| triples | stage | seconds | driver peak | JVM peak |", "|--:|---|--:|--:|--:|"]
    for name, st in row["stages"].items():
        steps = st.get("step_seconds")
        detail = f" ({', '.join(f'{k} {v:.0f}' for k, v in steps.items())})" if steps else ""
        lines.append(f"| {row['triples']:,} | {name} | {st['seconds']:.0f}{detail} | "
                     f"{st['driver_peak_mib']:,.0f} MiB | {st['jvm_peak_mib']:,.0f} MiB |")
    return "\n".join(lines)


# ============================================================================================


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--seed", type=int, default=0)
    common.add_argument("--driver-memory", default="6g", help="spark.driver.memory (default 6g)")
    common.add_argument("--set", dest="extra", action="append", default=[], metavar="KEY=VALUE",
                        help="config override, e.g. relation_stats.max_relations_per_entity=100")
    common.add_argument("--json", type=Path, help="append the result as one JSON line")
    common.add_argument("--workdir", type=Path, help="parent of the temporary directory")
    sub = parser.add_subparsers(dest="mode", required=True)
    vocab = sub.add_parser("vocab", parents=[common], help="candidate pairs on a large vocabulary")
    vocab.add_argument("--relations", type=int, default=20_000)
    vocab.add_argument("--triples", type=int, default=2_000_000,
                       help="triples drawn (fewer remain after de-duplication)")
    vocab.add_argument("--entities", type=int, default=200_000)
    vocab.add_argument("--types", type=int, default=50)
    vocab.add_argument("--with-transe", action="store_true",
                       help="add a random relation embedding (TransE neighbour candidates)")
    synth = sub.add_parser("synth", parents=[common], help="ingest → entity_types → relation_stats")
    synth.add_argument("--triples", type=int, default=10_000_000)
    synth.add_argument("--dump", type=Path,
                       help="an existing pipeline.synth directory (skips generation)")
    args = parser.parse_args(argv)
    if args.mode == "vocab" and (args.triples < args.relations or args.types < 2):
        parser.error("vocab needs --triples ≥ --relations (every relation gets a triple) "
                     "and --types ≥ 2 (second types differ from the first)")

    row = run_vocab(args) if args.mode == "vocab" else run_synth(args)
    print(json.dumps(row), flush=True)
    print("\n" + (vocab_table(row) if args.mode == "vocab" else synth_table(row)))
    if args.json:
        with open(args.json, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
