"""Deterministic synthetic Freebase-like knowledge graph (docs/ARCHITECTURE.md).

Why this shape: the generator backs the ingest tests (exact row and quarantine counts), the SCOS
merge evaluation (planted redundant relations with known ground truth), the QA evaluation
(PathQuestion-style questions with exact gold answers) and the scale benchmarks (10⁵…10⁸
edges), so every count is exact, every byte is a function of (n_triples, seed, options), and
nothing proportional to the number of edges is ever held in memory.

The graph (``pipeline.synth_world``), its names (``pipeline.synth_names``), questions
(``pipeline.synth_questions``) and files (``pipeline.synth_dump``, ``pipeline.synth_documents``)
are made by the sibling modules; this one resolves the options and writes the dump.

Output (``out_dir``): ``kg.nt`` or ``kg.nt.gz`` (N-Triples: graph edges, one ``type.object.type``
line, one ``@en`` name, an English description, 0-2 aliases per entity, some non-English names
and dated/numeric literal facts, and optionally malformed lines at stratified positions),
``kg.tsv`` (the edges: ``s_mid \\t relation \\t o_mid``, same order), ``families.json`` (ground
truth), ``questions.jsonl`` (2- and 3-hop questions, answers computed by walking the generated
graph), the same questions split into ``train.jsonl`` / ``dev.jsonl`` / ``test.jsonl``
(:func:`pipeline.synth_questions.question_splits`) and ``manifest.json`` (params, counts,
per-relation counts, sha256 of every file).

A question record: ``id``, ``question``, ``answers`` (names), ``answer_keys`` (mids, sorted),
``topic_entities`` (one mid), ``topic_names``, ``path`` (the gold chain in the graph's relation
names; a hop walked against the relation's direction is the name prefixed with
:data:`INVERSE_PREFIX`, e.g. ``["~film.film.directed_by", "film.film.starring"]``), ``hops``,
and — in every output but the all-defaults one, which stays byte for byte what it was —
``wording`` (train | heldout | wild) and ``inverse`` (any ``~`` hop); a wild question adds
``noise`` (``{"typos": n, "lower": bool}``). The splits add ``split``.

Generalisation variants (options of :func:`generate`; ``lokg synth`` flags)
--------------------------------------------------------------------------------
Held-out graphs differ from a training graph in relation naming, entity names, question wording
and in questions that walk relations backwards; each option varies one of these:

* ``naming`` — relation names: ``dotted`` ``film.film.directed_by`` (default), ``freebase``
  ``/film/film/directed_by``, ``underscored`` ``__film__film__directed_by``, ``camel``
  ``filmFilmDirectedBy``, ``plain`` ``directed_by`` (the last segment; where two relations
  share it, type and relation: ``person_nationality`` / ``actor_nationality``). Edges,
  families.json, paths and manifest counts use the scheme's names; types, names and other
  literal predicates keep theirs.
* ``entity_names`` — the ``@en`` names (and so topic_names and answers): ``plain``,
  ``underscored`` (``John_Smith``) or ``disambiguated`` (a seeded :data:`DISAMBIGUATED_SHARE`
  get ``John Smith (politician)``, ``The Last Garden (film)``).
* ``question_style`` — ``pathquestion`` (default: forward 2-/3-hop chains over every family)
  or ``metaqa``: MetaQA-like movie questions over the film families (plus film.film.written_by,
  film.film.genre and film.film.language, with film genres and languages as types — added only
  in this style) whose hops may walk a relation backwards ("what movies did X direct": one
  ``~film.film.directed_by`` hop; "which films share the director of X": directed_by then
  ~directed_by, the topic never among the answers). ``hops`` picks the hop counts (1-3;
  default 1, 2, 3). Inverse hops read a reverse index of the families walked backwards, built
  on first use, so this style refuses graphs above :data:`MAX_INVERSE_TRIPLES` triples.
* ``test_wording`` — ``heldout`` writes the test split in the held-out wording
  (``pipeline.synth_wording``: other verbs and syntax than any training template) while
  train/dev keep the train wording; the questions themselves (topics, chains, answers) are the
  same as with ``train``, so the two dumps make a paired "unseen wording" transfer split.
  ``wild`` (either style) writes it as varied as people ask (``pipeline.synth_wild``:
  passives, hops asked from their far end, shared objects, the wh-word last, keywords, words
  the relation's name lacks, lower-cased names and typos), the questions again the same.
* ``max_answers`` — the most answers a question may have (default 5).
* ``withhold`` — N > 0 leaves out of kg.nt / kg.tsv the last edge of the first N 2-hop
  questions that only that edge answers, and writes the documents that state them
  (``linked_documents.jsonl``, for ``documents.corpus``; their triples in
  ``openie_linked.json``, for ``triple_extract.backend=precomputed``; the edges and their
  questions in ``withheld.json``): questions a graph built from the dump cannot answer until
  query-driven feedback fills the edge in from the documents.
* ``articles`` — a share in [0, 1]: ``articles.jsonl`` holds an article for that seeded share of
  the entities, titled with the entity's name, a sentence per fact it is the subject of with a
  date the triple lacks (:func:`pipeline.synth_documents.write_articles`): linked text for
  ``documents.corpus``, from which ``triple_context`` restores each triple's sentence and
  answers cite it.
  The graph and the questions are those of the same options without it.
"""


from __future__ import annotations

import json
from pathlib import Path

from lokg.pipeline.synth_documents import withhold_edges, write_articles
from lokg.pipeline.synth_dump import write_graph, write_question_files
from lokg.pipeline.synth_names import relation_names
from lokg.pipeline.synth_questions import draw_questions
from lokg.pipeline.synth_schema import SynthError, families_ground_truth
from lokg.pipeline.synth_wording import STYLES, WORDINGS
from lokg.pipeline.synth_world import World

GENERATOR = "lokg-synth"
VERSION = 1
MIN_TRIPLES = 100

#: Relation naming schemes (``generate(naming=...)``, module docstring).
NAMINGS = ("dotted", "freebase", "underscored", "camel", "plain")
#: Surface forms of entity names (``generate(entity_names=...)``).
ENTITY_NAMES = ("plain", "underscored", "disambiguated")
#: Largest graph the metaqa style accepts: its inverse hops need a reverse index in memory
#: (4 bytes per edge of every family walked backwards, about 30 while one is built).
MAX_INVERSE_TRIPLES = 2_000_000
#: The hop counts a question style may ask (all of them by default).
STYLE_HOPS = {"pathquestion": (2, 3), "metaqa": (1, 2, 3)}
#: The generalisation options of :func:`generate` and their defaults (``hops``: the style's).
OPTION_DEFAULTS = {"naming": "dotted", "entity_names": "plain",
                   "question_style": "pathquestion", "hops": None, "test_wording": "train",
                   "max_answers": 5, "withhold": 0, "articles": 0.0}


def _options(n_triples: int, malformed_rate: float, given: dict) -> tuple[dict, dict]:
    """(every option resolved, the ones differing from their defaults) — SynthError names an
    argument or option that is unknown or out of range."""
    if n_triples < MIN_TRIPLES:
        raise SynthError(f"n_triples must be at least {MIN_TRIPLES}, got {n_triples}")
    if not 0.0 <= malformed_rate <= 0.5:
        raise SynthError(f"malformed_rate must be within [0, 0.5], got {malformed_rate}")
    for key, allowed in (("naming", NAMINGS), ("entity_names", ENTITY_NAMES),
                         ("question_style", STYLES), ("test_wording", WORDINGS)):
        if given[key] not in allowed:
            raise SynthError(f"{key}={given[key]!r}: choose one of {', '.join(allowed)}")
    style = given["question_style"]
    allowed = STYLE_HOPS[style]
    hops = tuple(sorted(set(given["hops"] or allowed)))
    if not set(hops) <= set(allowed):
        raise SynthError(f"hops={list(given['hops'])}: question_style={style!r} asks "
                         f"{'/'.join(map(str, allowed))}-hop questions only")
    if given["withhold"] < 0 or (given["withhold"] and n_triples > MAX_INVERSE_TRIPLES):
        raise SynthError(f"withhold={given['withhold']}: a count >= 0, on graphs of at most "
                         f"{MAX_INVERSE_TRIPLES:,} triples (the dump files are rewritten)")
    if not 0.0 <= given["articles"] <= 1.0:
        raise SynthError(f"articles={given['articles']}: a share of the entities within [0, 1]")
    if given["max_answers"] < 1:
        raise SynthError(f"max_answers must be at least 1, got {given['max_answers']}")
    if style == "metaqa" and n_triples > MAX_INVERSE_TRIPLES:
        raise SynthError(f"question_style='metaqa' holds a reverse index in memory: n_triples "
                         f"must be at most {MAX_INVERSE_TRIPLES:,}, got {n_triples:,}")
    resolved = {**given, "hops": hops}
    defaults = {**OPTION_DEFAULTS, "hops": allowed}
    changed = {k: list(v) if k == "hops" else v for k, v in resolved.items() if v != defaults[k]}
    return resolved, changed


def labelled_overrides(dump: str | Path) -> list[str]:
    """Build overrides that let a build of this dump learn from its train/dev questions:
    relation knowledge (and its gates, on dev) and GAT's gold-path term."""
    dump = Path(dump)
    return [f"relation_knowledge.questions={dump / 'train.jsonl'}",
            f"relation_knowledge.dev_questions={dump / 'dev.jsonl'}",
            f"gat.questions={dump / 'train.jsonl'}"]


def linked_text_overrides(dump: str | Path) -> list[str]:
    """Build overrides that read the dump's articles (``articles`` > 0) as linked text, from
    which triple_context restores sentences that answers cite; none when it has none."""
    return ["documents.corpus=articles.jsonl"] if (Path(dump) / "articles.jsonl").is_file() else []


def generate(out_dir, *, n_triples: int, seed: int = 0, malformed_rate: float = 0.0,
             gzip: bool = False, n_questions: int = 1000,
             naming: str = OPTION_DEFAULTS["naming"],
             entity_names: str = OPTION_DEFAULTS["entity_names"],
             question_style: str = OPTION_DEFAULTS["question_style"],
             hops: tuple[int, ...] | None = OPTION_DEFAULTS["hops"],
             test_wording: str = OPTION_DEFAULTS["test_wording"],
             max_answers: int = OPTION_DEFAULTS["max_answers"],
             withhold: int = OPTION_DEFAULTS["withhold"],
             articles: float = OPTION_DEFAULTS["articles"]) -> dict:
    """Write the synthetic KG into ``out_dir`` and return its manifest (also manifest.json).

    The options after ``n_questions`` are the generalisation variants (module docstring); with
    all of them at their defaults the output is the original generator's, byte for byte."""
    options, changed = _options(n_triples, malformed_rate, dict(
        naming=naming, entity_names=entity_names, question_style=question_style, hops=hops,
        test_wording=test_wording, max_answers=max_answers, withhold=withhold,
        articles=articles))
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    world = World(n_triples, seed, movie=question_style == "metaqa", entity_names=entity_names)
    names = relation_names(world.families, naming)
    files, relation_counts, literal, typed, n_malformed = write_graph(
        world, names, out, n_triples, malformed_rate, gzip)
    questions = _write_questions(world, names, out, files, n_questions, options, changed)
    withheld = withhold_edges(world, names, out, questions, withhold, files) if withhold else []
    for edge in withheld:
        relation_counts[edge["relation"]] -= 1
    if articles:
        files.update(write_articles(world, out, articles))
    params = {"n_triples": n_triples, "seed": seed, "malformed_rate": malformed_rate,
              "gzip": gzip, "n_questions": n_questions, **changed}
    counts = {"triples": n_triples - len(withheld), "entities": world.n_entities,
              "relations": sum(1 for c in relation_counts.values() if c),
              "literal_lines": literal, "type_assertions": typed,
              "malformed_lines": n_malformed, "questions": len(questions)}
    return _write_manifest(out, params, counts, world.sizes, relation_counts, files)


def _write_questions(world: World, names, out: Path, files: dict[str, str], n_questions: int,
                     options: dict, changed: dict) -> list:
    """Draw the questions and write their files (added to ``files``); the questions."""
    questions = draw_questions(world, n_questions, names, style=options["question_style"],
                               hops=options["hops"], max_answers=options["max_answers"],
                               test_wording=options["test_wording"],
                               extended=bool(changed.keys() - {"articles"}))
    files.update(write_question_files(out, families_ground_truth(world.families, names),
                                      questions))
    return questions


def _write_manifest(out: Path, params: dict, counts: dict, entity_types: dict[str, int],
                    relation_counts: dict[str, int], files: dict[str, str]) -> dict:
    """manifest.json: what was asked, what was written and every file's sha256."""
    manifest = {"generator": GENERATOR, "version": VERSION, "params": params, "counts": counts,
                "entity_types": entity_types, "relation_counts": relation_counts,
                "files": files}
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest
