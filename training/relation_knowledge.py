"""Stage ``relation_knowledge``: fit the relation knowledge the runtime's ``precision`` and
``route`` policies and LOKG's relation feeds read (``runtime/relknow.py`` explains the model).

Why a stage. Everything here is learned offline, once per build: the KG statistics behind the
consistency check (functional relations, exclusive relation pairs) from the store's triples,
and — when ``relation_knowledge.questions`` names labelled training questions (PathQuestion
``train.txt`` or JSONL with ``topic_entities`` and ``path``) — the masked question embeddings
the chain predictor votes with and the lexicon. Without questions only the zero-shot parts are
written (relation names embedded as text, the KG checks). The encoder is the store's own
(``encoder`` of entity_encode); a build without it gets a lexicon-only artefact (0-wide
vectors: the runtime predicts chains from the lexicon, no zero-shot matcher) and the report
says so. Training questions are read with ``common.datasets`` (gat's parser keeps
only distinct paths, not the question texts).

Thresholds come from ``relation_knowledge.dev_questions`` only (never from test: a file whose
name is a test split is refused, as is a dev file given as training questions), by this fixed
procedure:

1. θ_lift: the value of :data:`LIFT_GRID` whose named relations have the best micro-F1 against
   the dev questions' gold relations (ties: the smaller θ);
2. θ_zs (zero-shot cosine, only without labelled questions): the value of
   :data:`ZERO_SHOT_GRID` whose derived answers are right (H@1) on the most dev questions
   (ties: the larger θ);
3. the precision gate (exactly one answer, familiar wording, every content word explained by
   the chain — :meth:`RelationKnowledge.unexplained`, a fixed rule, not fitted: dev has the
   training hop count and cannot show a hop left out): over share τ ≥ ``min_share`` ×
   support σ (:func:`precision_family`, σ up to 1: every neighbour votes for the chain), the
   gate passing the most dev questions among those whose derived answers reach H@1 ≥
   ``precision_target`` on the questions they pass (ties: higher precision, then the grid's
   order); when none reaches it, the gate of highest 95 % Wilson lower bound on that
   precision (ties: coverage) — not the strictest, which may rest on a handful of questions —
   if its precision reaches :data:`PRECISION_FLOOR`, else a gate that passes nothing.
   Dev questions need answers, not relation paths: the gate is calibrated on whether each
   derived answer is right (a path, where given, also scores θ_lift and the chain accuracy).

Without dev questions the defaults stand (θ_lift = :data:`DEFAULT_LIFT`, θ_zs =
:data:`DEFAULT_ZERO_SHOT_COSINE`) and the precision gate passes nothing (``max_answers`` 0):
it is the one gate a zero-call answer passes under either policy, and a precision no labelled
question of this graph measured is no promise to make — the answer comes from the reader, or
from retrieval with reader none, and says so. The report says which, and gives the dev chain
accuracy and the gate's dev coverage and precision (what every answer quotes as its
calibration).

Not fitted but measured on the training questions: how their wording names their hops
(``hop_range_agreement``, the share whose chain length each reading of
``runtime.question_text.hop_runs`` allows); the runtime bounds chains by a reading only where it
holds for ``relknow.HOP_RANGE_TRUST`` of them.

Gold relation names go through ``relation_map`` to canonical ones; questions naming an unknown
entity key or relation are counted and skipped. Scale: the KG statistics run on the driver in
numpy (~40 bytes per triple); the question embeddings are ~1.5 kB per training question.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from lokg.common.datasets import DatasetError, load_jsonl, load_pathquestion
from lokg.common.metrics import score
from lokg.common.stage import Laps, StageError, torch_threads
from lokg.common.store_names import StoreNames
from lokg.runtime.contract import read_table
from lokg.runtime.question_text import (HOP_READINGS, HopRuns, hop_runs, mask_topic,
                                   question_words, relation_texts)
from lokg.runtime.relknow import (
    ARTEFACT,
    FORMAT_VERSION,
    MODEL_FILE,
    VECTORS_FILE,
    Facts,
    Gate,
    RelationKnowledge,
    learn_exclusive,
    learn_functional,
    learn_inverses,
    precision_gate,
    split_hop,
)
from lokg.training.settings import RelationKnowledgeSettings

STAGE = "relation_knowledge"
LIFT_GRID = (1.25, 1.5, 2.0, 3.0, 4.0, 6.0, 8.0)
ZERO_SHOT_GRID = (0.3, 0.4, 0.5, 0.6, 0.7)
DEFAULT_LIFT = 2.0
DEFAULT_ZERO_SHOT_COSINE = 0.5
#: the precision gate's grid: shares up to a chain alone among the instantiating votes, supports
#: up to every neighbour voting for it
PRECISION_SHARES = (0.6, 0.7, 0.8, 0.9, 1.0)
#: The least dev precision a zero-call gate may be fitted at when no cell reaches
#: ``precision_target``: below it the gate passes nothing — "derived from the graph" is a
#: promise, and a store whose derivations dev finds wrong this often makes none.
PRECISION_FLOOR = 0.95
PRECISION_SUPPORTS = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)
INVERSE_MIN_SHARE = 0.7  # of both relations' facts stated the other way round
INVERSE_MIN_SUPPORT = 10
TRAIN_REFUSED = ("dev", "test", "valid", "validation")  # training questions: train split only
DEV_REFUSED = ("test",)


def settings(config: Mapping) -> RelationKnowledgeSettings:
    """The section over its defaults, checked (unknown keys and bad values name themselves)."""
    cfg = RelationKnowledgeSettings.of(config, StageError)
    for key, refused in (("questions", TRAIN_REFUSED), ("dev_questions", DEV_REFUSED)):
        if cfg[key] and Path(str(cfg[key])).stem.lower() in refused:
            raise StageError(f"{STAGE}.{key}={cfg[key]}: a {Path(str(cfg[key])).stem} split "
                             f"may not be read here (training questions: train only; "
                             f"thresholds: dev only; test is for the numbers)")
    if cfg["questions"] and cfg["dev_questions"] and \
            Path(str(cfg["questions"])).resolve() == Path(str(cfg["dev_questions"])).resolve():
        raise StageError(f"{STAGE}: questions and dev_questions are the same file")
    return cfg


# ============================================================================================
# questions


@dataclass
class Labelled:
    """Questions resolved against the store: masked text, topic ids, chain, gold answers, and
    the runs of words the wording names its hops in (runtime.question_text.hop_runs)."""

    masked: list[str]
    topics: list[list[int]]
    chains: list[tuple[str, ...]]  # canonical relation names
    answers: list[tuple[str, ...]]
    skipped: int
    hop_runs: list[HopRuns] = field(default_factory=list)

    def hop_range_agreement(self) -> dict[str, float] | None:
        """Per reading of the hop ranges (runtime.question_text.HOP_READINGS), the share of the
        questions whose chain length it allows (None: no questions)."""
        if not self.chains:
            return None
        out = {}
        for reading, read in HOP_READINGS.items():
            bounds = [read(runs.range) for runs in self.hop_runs]
            allowed = [low <= len(c) <= high for c, (low, high) in zip(self.chains, bounds)]
            out[reading] = round(sum(allowed) / len(allowed), 6)
        return out


def read_questions(path: str | Path):
    """Questions of a PathQuestion split file or a JSONL file (common.datasets' readers)."""
    path = Path(path)
    try:
        if path.suffix in (".jsonl", ".json"):
            return load_jsonl(path).questions
        return load_pathquestion(path.parent, path.stem).questions
    except DatasetError as exc:
        raise StageError(f"{STAGE}: {exc}") from None


def resolve(store: StoreNames, questions, *, paths: bool = True) -> Labelled:
    """The questions resolved against the store's names; one naming an unknown entity key or
    relation is counted as skipped, and so is one without a relation path unless ``paths`` is
    false (dev questions: the gate is calibrated on their answers alone)."""
    out = Labelled([], [], [], [], 0)
    for q in questions:
        topics = [store.key_to_id.get(k) for k in q.topic_entities]
        chain = tuple(store.canonical_hop(h) for h in q.path)
        if (paths and not chain) or not topics or None in topics or None in chain:
            out.skipped += 1
            continue
        forms = [f for t in topics for f in store.forms(t)]
        out.masked.append(mask_topic(q.question, forms))
        out.hop_runs.append(hop_runs(q.question, forms))
        out.topics.append(topics)
        out.chains.append(chain)
        out.answers.append(tuple(q.answers))
    return out


def fit_lexicon(masked: Sequence[str], chains: Sequence[tuple[str, ...]], min_support: int
                ) -> dict[str, dict[str, float]]:
    """lift(w, r) = P(r on path | w) / P(r on path) for words in ≥ min_support questions
    (entries with lift > 1 only: a lift ≤ 1 never names a relation)."""
    n = len(masked)
    words = [set(question_words(m)) for m in masked]
    rels = [{split_hop(h)[0] for h in c} for c in chains]
    word_count = Counter(w for ws in words for w in ws)
    rel_count = Counter(r for rs in rels for r in rs)
    joint = Counter((w, r) for ws, rs in zip(words, rels) for w in ws for r in rs)
    lexicon: dict[str, dict[str, float]] = {}
    for (w, r), c in sorted(joint.items()):
        if word_count[w] < min_support:
            continue
        lift = (c / word_count[w]) / (rel_count[r] / n)
        if lift > 1.0:
            lexicon.setdefault(w, {})[r] = round(lift, 6)
    return lexicon


# ============================================================================================
# threshold selection on dev


def wilson(successes: int, n: int, z: float = 1.959964) -> tuple[float, float]:
    """95% Wilson score interval of a proportion (0, 0 for n = 0)."""
    if n == 0:
        return 0.0, 0.0
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def gate_stats(gate: Gate, assessments, correct: Sequence[bool]) -> dict:
    """Dev coverage and precision (H@1 of the derived answer where the gate passes)."""
    passed = [ok for a, ok in zip(assessments, correct)
              if gate.check(a.prediction, a.derivation, a.consistency)[0]]
    n, hits = len(correct), sum(passed)
    return {"gate": gate.to_dict(), "passed": len(passed), "n": n,
            "coverage": round(len(passed) / n, 6) if n else 0.0,
            "precision": round(hits / len(passed), 6) if passed else None,
            "precision_95ci": [round(x, 6) for x in wilson(hits, len(passed))]}


def choose_gate(family: Sequence[Gate], assessments, correct: Sequence[bool],
                min_precision: float) -> tuple[Gate, dict]:
    """The gate of ``family`` passing the most dev questions among those whose precision
    reaches ``min_precision`` (ties: higher precision, then the family's order); when none
    does, the gate of highest Wilson lower bound on its precision, so that 2 of 2 right does
    not outrank 129 of 132 (ties: coverage, order)."""
    stats = [gate_stats(g, assessments, correct) for g in family]
    good = [i for i, s in enumerate(stats)
            if s["precision"] is not None and s["precision"] >= min_precision]
    if good:
        best = min(good, key=lambda i: (-stats[i]["coverage"], -stats[i]["precision"], i))
    else:
        best = min(range(len(stats)), key=lambda i: (
            -stats[i]["precision_95ci"][0], -stats[i]["coverage"], i))
    return family[best], stats[best]


def floored(gate: Gate, stats: dict) -> tuple[Gate, dict]:
    """The gate as chosen, or — where its dev precision is under :data:`PRECISION_FLOOR` —
    one passing nothing, its stats saying why."""
    if (stats["precision"] or 0.0) >= PRECISION_FLOOR:
        return gate, stats
    return replace(gate, max_answers=0), {
        **stats, "passed": 0, "coverage": 0.0, "precision": None, "precision_95ci": None,
        "refused": f"no gate reaches precision {PRECISION_FLOOR} on dev (best "
                   f"{stats['precision']}): the gate passes nothing"}


def precision_family(min_share: float) -> list[Gate]:
    """The precision gates dev chooses from (one answer, familiar wording), loosest first."""
    return [precision_gate({"min_share": share, "min_support": sup})
            for share in PRECISION_SHARES if share >= min_share for sup in PRECISION_SUPPORTS]


def choose_lift(lexicon_names: Callable[[str, float], frozenset], dev: Labelled,
                relation_ids: Mapping[str, int]) -> tuple[float, dict]:
    """Step 1: the θ_lift whose named relations best match the gold relations (micro-F1) of
    the dev questions that have a relation path."""
    gold = [{relation_ids[split_hop(h)[0]] for h in chain} for chain in dev.chains]
    scores = {}
    for theta in LIFT_GRID:
        tp = fp = fn = 0
        for masked, g in ((m, g) for m, g in zip(dev.masked, gold) if g):
            named = lexicon_names(masked, theta)
            tp, fp, fn = tp + len(named & g), fp + len(named - g), fn + len(g - named)
        scores[theta] = 2 * tp / (2 * tp + fp + fn) if tp else 0.0
    best = max(LIFT_GRID, key=lambda t: (scores[t], -t))
    return best, {"micro_f1": {str(t): round(f, 6) for t, f in scores.items()}}


# ============================================================================================
# the stage


def relation_prior(chains: Sequence[tuple[str, ...]]) -> dict[str, float]:
    """P(r on the path) over the training questions (turns a lift into P(r | w))."""
    counts = Counter(r for c in chains for r in {split_hop(h)[0] for h in c})
    return {r: round(c / len(chains), 9) for r, c in sorted(counts.items())}


@dataclass(frozen=True)
class Learned:
    """What the graph and the training questions teach, before any threshold is picked."""

    relation_names: list[str]
    chains: list[tuple[str, ...]]  # canonical relation names, most frequent first
    question_chain: np.ndarray  # each training question's index into chains
    lexicon: dict
    prior: dict
    hop_range_agreement: dict[str, float] | None
    kg: dict  # the functional, exclusive and inverse relations

    @classmethod
    def of(cls, cfg: Mapping, store: StoreNames, train: Labelled | None, kg: dict) -> Learned:
        chains, question_chain, lexicon, prior = _chain_votes(train, cfg)
        return cls([store.relation_names[i] for i in sorted(store.relation_names)], chains,
                   question_chain, lexicon, prior,
                   train.hop_range_agreement() if train else None, kg)


def _spec(cfg: Mapping, learned: Learned, thresholds: Mapping, report: Mapping) -> dict:
    """The artefact's JSON."""
    return {
        "format_version": FORMAT_VERSION,
        "settings": {k: cfg[k] for k in ("k", "min_share", "min_support", "max_frontier",
                                         "precision_target")},
        "thresholds": dict(thresholds),
        "chains": [list(c) for c in learned.chains],
        "relation_names": learned.relation_names,
        "lexicon": learned.lexicon,
        "relation_prior": learned.prior,
        "functional": learned.kg["functional"],
        "exclusive": [list(x) for x in learned.kg["exclusive"]],
        "inverse_pairs": learned.kg["inverse_pairs"],
        "hop_range_agreement": learned.hop_range_agreement,
        "fit": dict(report),
    }


class Encoder:
    """The store's question encoder (``models/encoder.json`` of entity_encode) with the stage's
    torch threads, or none: without it chains are predicted from the lexicon only and the
    zero-shot matcher is off (the artefact's vectors are 0-wide)."""

    def __init__(self, inputs: Mapping[str, str], cfg: Mapping):
        self.model, self.batch = None, int(cfg["batch_size"])
        self._threads = ExitStack()  # the stage's torch threads, restored by close()
        if "encoder" not in inputs:
            return
        from lokg.runtime.encoder import EncoderError, SentenceEncoder

        self._threads.enter_context(torch_threads(cfg["threads"]))
        path = Path(inputs["encoder"])
        try:
            self.model = SentenceEncoder.from_spec(json.loads(path.read_text()),
                                                   device=str(cfg["device"]))
        except (OSError, ValueError, EncoderError) as exc:
            self.close()
            raise StageError(f"{path}: cannot load the question encoder ({exc})") from None

    def close(self) -> None:
        self._threads.close()

    def queries(self, texts: Sequence[str]) -> np.ndarray:
        if self.model is None:
            return np.zeros((len(texts), 0), dtype=np.float32)
        return self.model.encode_queries(list(texts), batch_size=self.batch)

    def passages(self, texts: Sequence[str]) -> np.ndarray:
        if self.model is None:
            return np.zeros((len(texts), 0), dtype=np.float32)
        return self.model.encode_passages(list(texts), batch_size=self.batch)


def run(config: Mapping, inputs: Mapping[str, str], out_dir: str) -> dict:
    """Stage entry point: fit, pick thresholds on dev, write ``models/relknow``."""
    cfg = settings(config)
    missing = sorted({"entities", "relations", "relation_map", "triples"} - set(inputs))
    if missing:
        raise StageError(f"{STAGE} needs inputs {missing} (have {sorted(inputs)})")
    lap = Laps()
    store = StoreNames(inputs)
    tri = read_table(Path(inputs["triples"]), "triples")
    s, r, o = (tri.column(c).to_numpy() for c in ("s", "r", "o"))
    facts = Facts(s, r, o, len(store.relation_ids))
    kg, kg_report = _kg_checks(s, r, o, store, cfg)
    lap("kg_checks")
    train, dev = _labelled(cfg, store)
    lap("read_questions")
    learned = Learned.of(cfg, store, train, kg)
    encoder = Encoder(inputs, cfg)
    try:
        lap("load_encoder")
        arrays = {"question_vectors": encoder.queries(train.masked if train else []),
                  "question_chain": learned.question_chain,
                  "relation_vectors": encoder.passages(relation_texts(learned.relation_names))}
        dev_vectors = encoder.queries(dev.masked) if dev is not None and train else None
        lap("embed_questions")

        def knowledge(th: Mapping) -> RelationKnowledge:
            return RelationKnowledge(_spec(cfg, learned, th, {}), arrays, store.relation_ids,
                                     STAGE)

        report = {**_fit_report(cfg, train, dev, encoder, learned), **kg_report}
        thresholds = _default_thresholds(cfg)
        if dev is not None and dev.masked:
            thresholds, report["selection"] = select_thresholds(
                knowledge, thresholds, dev, dev_vectors, facts, store, encoder, cfg)
        else:
            report["selection"] = "no dev questions: default thresholds"
        lap("select_thresholds")
    finally:
        encoder.close()
    return _write(Path(out_dir) / ARTEFACT, _spec(cfg, learned, thresholds, report), arrays, lap)


def _write(target: Path, spec: dict, arrays: Mapping[str, np.ndarray], lap: Laps) -> dict:
    """The artefact's two files, and the stage's outputs and report (the fit report without
    its per-relation checks, the thresholds and the step times)."""
    target.mkdir(parents=True, exist_ok=True)
    spec["fit"]["step_seconds"] = lap.seconds
    (target / MODEL_FILE).write_text(json.dumps(spec, indent=1, sort_keys=True))
    np.savez(target / VECTORS_FILE, **arrays)
    lap("write")
    summary = {k: v for k, v in spec["fit"].items() if k != "relations_checked"}
    summary.update(thresholds=spec["thresholds"],
                   hop_range_agreement=spec["hop_range_agreement"], step_seconds=lap.seconds)
    return {"outputs": {ARTEFACT: str(target)}, "report": summary}


def _kg_checks(s, r, o, store: StoreNames, cfg: Mapping) -> tuple[dict, dict]:
    """What the graph itself says about its relations (functional, mutually exclusive,
    inverse pairs), by name for the model, with the counts behind them for the report."""
    names = store.relation_names
    functional, functional_stats = learn_functional(
        s, r, o, tolerance=float(cfg["functional_tolerance"]),
        min_subjects=int(cfg["functional_min_subjects"]))
    exclusive, exclusive_stats = learn_exclusive(
        s, r, o, tolerance=float(cfg["exclusive_tolerance"]),
        min_support=int(cfg["exclusive_min_support"]))
    inverses = [[names[a], names[b]] for a, b in learn_inverses(
        s, r, o, min_share=INVERSE_MIN_SHARE, min_support=INVERSE_MIN_SUPPORT)]
    functional_names = [names[i] for i in functional]
    exclusive_names = [(names[a], names[b], same) for a, b, same in exclusive]
    kg = {"functional": functional_names, "exclusive": exclusive_names, "inverse_pairs": inverses}
    report = {"functional": functional_names, "exclusive": [list(x) for x in exclusive_names],
              "inverse_pairs": inverses,
              "relations_checked": {names[k]: {"subjects": v[0], "multi": v[1]}
                                    for k, v in functional_stats.items()},
              "exclusive_stats": exclusive_stats}
    return kg, report


def _labelled(cfg: Mapping, store: StoreNames) -> tuple[Labelled | None, Labelled | None]:
    """The training and dev questions resolved against the store; refused when training
    questions are configured and none resolves."""
    train = resolve(store, read_questions(cfg["questions"])) if cfg["questions"] else None
    if train is not None and not train.masked:
        raise StageError(f"{STAGE}.questions={cfg['questions']}: no question resolves against "
                         f"this store ({train.skipped} skipped)")
    dev = resolve(store, read_questions(cfg["dev_questions"]), paths=False) \
        if cfg["dev_questions"] else None
    return train, dev


def _chain_votes(train: Labelled | None, cfg: Mapping) -> tuple[list, np.ndarray, dict, dict]:
    """The training chains (most frequent first), each question's chain index, the lexicon
    and the relation prior; all empty without training questions (zero-shot)."""
    if not train:
        return [], np.zeros(0, dtype=np.int32), {}, {}
    chain_counts = Counter(train.chains)
    chains = sorted(chain_counts, key=lambda c: (-chain_counts[c], c))
    index = {c: i for i, c in enumerate(chains)}
    question_chain = np.array([index[c] for c in train.chains], dtype=np.int32)
    return (chains, question_chain, fit_lexicon(train.masked, train.chains,
                                                int(cfg["min_support"])),
            relation_prior(train.chains))


def _default_thresholds(cfg: Mapping) -> dict:
    return {"lift": DEFAULT_LIFT, "zero_shot_cosine": DEFAULT_ZERO_SHOT_COSINE,
            "precision": precision_gate({"min_share": float(cfg["min_share"]),
                                         "max_answers": 0}).to_dict()}


def _fit_report(cfg: Mapping, train: Labelled | None, dev: Labelled | None, encoder: Encoder,
                learned: Learned) -> dict:
    return {
        "questions": _counts(cfg["questions"], train),
        "dev_questions": _counts(cfg["dev_questions"], dev),
        "encoder": None if encoder.model is None else encoder.model.spec["model"],
        "predictor": ("knn" if train and encoder.model else "lexicon" if train
                      else "zero_shot" if encoder.model else "none"),
        "chains": len(learned.chains), "lexicon_words": len(learned.lexicon),
    }


def _counts(path, labelled: Labelled | None) -> dict | None:
    if labelled is None:
        return None
    return {"file": str(path), "used": len(labelled.masked), "skipped": labelled.skipped}


class _DevRun:
    """Every dev question assessed under one RelationKnowledge; span vectors cached across
    the calls (the θ_zs grid assesses the same questions once per θ)."""

    def __init__(self, dev: Labelled, dev_vectors: np.ndarray | None, facts: Facts,
                 store: StoreNames, encoder: Encoder):
        self.dev, self.dev_vectors, self.facts, self.store = dev, dev_vectors, facts, store
        self.encoder, self.spans = encoder, {}

    def embed(self, texts: list[str]) -> np.ndarray:
        todo = [t for t in dict.fromkeys(texts) if t not in self.spans]
        if todo:
            self.spans.update(zip(todo, self.encoder.queries(todo)))
        return np.stack([self.spans[t] for t in texts])

    def assess(self, kn: RelationKnowledge) -> tuple[list, list[bool]]:
        """(assessments, whether each derivation's endpoints hit the gold at 1)."""
        embed = self.embed if self.encoder.model is not None else None
        dev = self.dev
        out = [kn.assess(masked, topics, self.facts, embed=embed, runs=dev.hop_runs[i],
                         q_vec=self.dev_vectors[i] if self.dev_vectors is not None else None)
               for i, (masked, topics) in enumerate(zip(dev.masked, dev.topics))]
        correct = [bool(a.derivation and a.derivation.derivable and score(
            [self.store.names[e] for e in a.derivation.endpoints], gold).h1)
            for a, gold in zip(out, dev.answers)]
        return out, correct


def select_thresholds(knowledge: Callable[[Mapping], RelationKnowledge], defaults: dict,
                      dev: Labelled, dev_vectors: np.ndarray | None, facts: Facts, store: StoreNames,
                      encoder: Encoder, cfg: Mapping) -> tuple[dict, dict]:
    """Steps 1–4 of the module docstring on the dev questions."""
    thresholds = dict(defaults)
    selection: dict = {}
    base = knowledge(thresholds)
    if base.labelled:
        theta, selection["lift"] = choose_lift(
            lambda m, t: base.names(question_words(m), t), dev, store.relation_ids)
        thresholds["lift"] = theta
    run = _DevRun(dev, dev_vectors, facts, store, encoder)
    if not base.labelled and encoder.model is not None:
        thresholds["zero_shot_cosine"], selection["zero_shot_cosine"] = _zero_shot_cosine(
            knowledge, thresholds, run)
    kn = knowledge(thresholds)
    assessments, correct = run.assess(kn)
    precision, precision_stats = floored(*choose_gate(
        precision_family(kn.min_share), assessments, correct, float(cfg["precision_target"])))
    thresholds["precision"] = precision.to_dict()
    with_paths = [(a, tuple(store.hop(h) for h in c))
                  for a, c in zip(assessments, dev.chains) if c]
    selection.update({
        "dev_chain_accuracy": round(float(np.mean([a.prediction.chain == g
                                                   for a, g in with_paths])), 6)
        if with_paths else None,
        "dev_derived_h1": round(float(np.mean(correct)), 6),
        "precision_gate": precision_stats,
    })
    return thresholds, selection


def _zero_shot_cosine(knowledge: Callable[[Mapping], RelationKnowledge], thresholds: dict,
                      run: _DevRun) -> tuple[float, dict]:
    """θ_zs of the grid with the most dev questions derived right (ties: the larger θ)."""
    hits = {theta: sum(run.assess(knowledge({**thresholds, "zero_shot_cosine": theta}))[1])
            for theta in ZERO_SHOT_GRID}
    best = max(ZERO_SHOT_GRID, key=lambda t: (hits[t], t))
    return best, {"dev_correct": {str(t): h for t, h in hits.items()}}
