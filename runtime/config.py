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
    "types": {},
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
    "scos": {
        "enabled": True,
        "weights": [0.40, 0.30, 0.30],  # NMI signal, Jaccard, TransE cosine
        "theta_base": 0.75,
        "epsilon": 0.15,
        # without relation_embeddings: "zero" keeps the cosine term at 0 (max sim w1 + w2);
        # "renormalise" rescales w1, w2 to sum to w1 + w2 + w3
        "missing_embeddings": "zero",
    },
    "publish": {"keep": 3},
}


class ConfigError(ValueError):
    """A configuration file or override is invalid; the message names it."""


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
    return config
