"""The tables of a build: each one's Arrow schema, and which every build must hold."""

from __future__ import annotations

import pyarrow as pa

_ATTRIBUTE = pa.struct([("key", pa.string()), ("value", pa.string())])

#: Table name -> Arrow schema. Columns are required in this order; writers may not add others.
TABLE_SCHEMAS: dict[str, pa.Schema] = {
    "entities": pa.schema(
        [
            ("id", pa.int64()),
            ("key", pa.string()),  # the identifier in the source dump (mid, IRI local name, label)
            ("name", pa.string()),
            ("aliases", pa.list_(pa.string())),
            ("description", pa.string()),
            ("types", pa.list_(pa.string())),
            ("attributes", pa.list_(_ATTRIBUTE)),  # literal facts that are not names/aliases
        ]
    ),
    "relations": pa.schema([("id", pa.int64()), ("name", pa.string())]),
    # Distinct rows: ingest (every dump, document graph and feedback delta goes through it) and
    # scos_merge de-duplicate what they write; relation_stats counts rows and relies on it.
    "triples": pa.schema([("s", pa.int64()), ("r", pa.int64()), ("o", pa.int64())]),
    "quarantine": pa.schema(
        [
            ("file", pa.string()),
            ("line", pa.int64()),
            ("reason", pa.string()),
            ("text", pa.string()),
        ]
    ),
    # SCOS signals (spark_jobs/relation_stats.py). One row per relation of R0.
    "relation_stats": pa.schema(
        [
            ("r", pa.int64()),
            ("name", pa.string()),
            ("triples", pa.int64()),  # distinct (s, o) pairs
            ("heads", pa.int64()),  # distinct subjects
            ("tails", pa.int64()),  # distinct objects
            ("entities", pa.int64()),  # |heads ∪ tails|
            ("entropy", pa.float64()),  # tail conditional entropy H(r), nats
            (
                "type_pairs",  # P_r over (head type, tail type), sorted by (head_type, tail_type)
                pa.list_(
                    pa.struct(
                        [("head_type", pa.string()), ("tail_type", pa.string()), ("p", pa.float64())]
                    )
                ),
            ),
        ]
    ),
    # Candidate relation pairs with their signals (r_i < r_j).
    "relation_pairs": pa.schema(
        [
            ("r_i", pa.int64()),
            ("r_j", pa.int64()),
            ("shared_entities", pa.int64()),  # |E_i ∩ E_j|, exact
            ("jaccard", pa.float64()),
            ("nmi", pa.float64()),  # 1 − JSD_bits of the type-pair distributions
            ("source", pa.string()),  # generators, comma-separated: entity,transe,type
        ]
    ),
    # SCOS canonical mapping φ: R0 → R* (spark_jobs/scos_merge.py).
    "relation_map": pa.schema(
        [
            ("id", pa.int64()),  # original relation id (R0)
            ("name", pa.string()),
            ("canonical_id", pa.int64()),  # id in the rewritten relations table (R*)
            ("canonical_name", pa.string()),
        ]
    ),
    # One row per SCOS merge, in merge order.
    "merge_log": pa.schema(
        [
            ("step", pa.int64()),
            ("left", pa.string()),  # cluster names (most frequent member) before the merge
            ("right", pa.string()),
            ("sim", pa.float64()),
            ("nmi", pa.float64()),
            ("jaccard", pa.float64()),
            ("cos", pa.float64()),
            ("theta", pa.float64()),
            ("loss", pa.float64()),  # (1 − sim)·min(H_left, H_right), nats
            ("members", pa.list_(pa.string())),  # members of the merged cluster, sorted
        ]
    ),
    # TAIMR offline (spark_jobs, training).
    # μ(v) = (1 + ln(deg_in + 1))·div, div = in_relations / |R*| on the graph with inverse edges.
    "node_gain": pa.schema(
        [
            ("id", pa.int64()),
            ("deg_in", pa.int64()),  # incoming edges, inverse edges included
            ("in_relations", pa.int64()),  # distinct incoming (relation, direction) labels
            ("mu", pa.float64()),
        ]
    ),
    # Canonical triples plus their inverses (inverse = true: s/o swapped, relation r⁻¹), with the
    # GAT attention α(s→o|r), normalised over each node's out-edges (sums to 1 per s).
    "edges": pa.schema(
        [
            ("s", pa.int64()),
            ("r", pa.int64()),
            ("o", pa.int64()),
            ("inverse", pa.bool_()),
            ("attention", pa.float64()),
        ]
    ),
    # FAISS row → entity id for entity.faiss (and the rows of entity_vectors.npy).
    "entity_ids": pa.schema([("row", pa.int64()), ("id", pa.int64())]),
    # Top-K paths per (head, first relation) by S_topo; files bucket-NNNNN.parquet, head % buckets.
    "path_cache": pa.schema(
        [
            ("head", pa.int64()),
            ("rank", pa.int32()),  # 0-based rank within (head, first relation, direction)
            ("score", pa.float64()),  # S_topo
            ("relations", pa.list_(pa.int64())),  # canonical relation ids, hop by hop
            ("inverses", pa.list_(pa.bool_())),  # hop i walks r_i backwards
            ("nodes", pa.list_(pa.int64())),  # entities reached, hop by hop (last = answer)
        ]
    ),
    # Knowledge from documents; empty in builds from triple dumps. Ids are content
    # hashes (16 hex): doc_id of (title, text), chunk_id of (doc_id, start, text), sentence_id
    # of (doc_id, start, end); offsets are characters of the document's text, end exclusive.
    "documents": pa.schema([("doc_id", pa.string()), ("title", pa.string()),
                            ("source", pa.string()),  # file (and record) it was read from
                            ("chars", pa.int64())]),
    "chunks": pa.schema([("chunk_id", pa.string()), ("doc_id", pa.string()),
                         ("ordinal", pa.int32()), ("start", pa.int64()), ("end", pa.int64()),
                         ("tokens", pa.int32()), ("text", pa.string())]),
    "sentences": pa.schema([("sentence_id", pa.string()), ("doc_id", pa.string()),
                            ("chunk_id", pa.string()),  # the first chunk holding it
                            ("ordinal", pa.int32()), ("start", pa.int64()), ("end", pa.int64()),
                            ("text", pa.string())]),
    # Provenance: a canonical triple -> a chunk and sentence it was extracted from (many a triple).
    "triple_sources": pa.schema([("s", pa.int64()), ("r", pa.int64()), ("o", pa.int64()),
                                 ("chunk_id", pa.string()), ("sentence_id", pa.string())]),
    # Query-driven feedback: a canonical triple a feedback delta added -> the
    # delta, the feedback record it answers and its passage (many rows a triple).
    "feedback_lineage": pa.schema([("s", pa.int64()), ("r", pa.int64()), ("o", pa.int64()),
                                   ("delta_id", pa.string()), ("feedback_id", pa.string()),
                                   ("chunk_id", pa.string()), ("sentence_id", pa.string())]),
    # Context restoration: a triple's best candidate sentence above triple_context.floor.
    "triple_context": pa.schema([("s", pa.int64()), ("r", pa.int64()), ("o", pa.int64()),
                                 ("sentence_id", pa.string()), ("score", pa.float32()),
                                 ("text", pa.string())]),
}

#: Tables every build must contain.
REQUIRED_TABLES = ("entities", "relations", "triples")
#: An entity type written ``~<relation>`` was derived from the entity's most frequent incoming
#: relation (spark_jobs/entity_types.py), not read from a schema.
INCOMING_TYPE_PREFIX = "~"
