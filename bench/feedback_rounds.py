"""Query-driven feedback: does the refresh loop converge? Rounds of
build → answer → refresh on a sparsified musique-openie subset, one table row per round.

    python -m bench.feedback_rounds --questions 20 --rounds 5 --work /tmp/lokg-rounds \\
        --markdown /tmp/lokg-rounds/table.md

**Protocol** (fixed before any result was looked at):

* **Subset.** ``--questions`` N questions of musique-openie drawn with ``--seed`` (Python's
  ``random.Random(seed).sample``), the union of their paragraphs (20 each, gold and
  distractors) as the corpus (evaluation/text_datasets.py), and the gpt-3.5 OpenIE file
  restricted to those passages.
* **Sparsified start.** A seeded ``--withhold`` share of the distinct extracted triples —
  folded as triple_extract folds them (``entity_key`` on both ends, ``relation_key`` on the
  phrase), well-formed, head ≠ tail — is taken out of every passage that states it. The build
  reads the sparse copy (``triple_extract.precomputed_file``); enrichment reads the full file
  (``feedback_enrich.precomputed_file``). So ``precomputed`` enrichment is an **oracle
  extraction** of each retrieved passage — the triples gpt-3.5 found there, an upper bound for
  a real extractor; the arm ``feedback-offline`` extracts the retrieved passages with the spaCy
  extractor instead (a real one, which may find triples the file never had).
* **Round 0** builds the store through ``pipeline.driver.build`` (cheap learned stages, not
  measured here: :data:`CHEAP`), then answers every question with ``Runtime.ask(q,
  llm=none)`` (``--llm``: another reader, e.g. ``local``; recorded in the settings) under the
  runtime's defaults (policy, budget 2048, TCR sentences) — the runtime writes the feedback
  log itself. **Round r ≥ 1** builds again from the same dump into the
  same store (the refresh: ``feedback_enrich`` reads the log and CURRENT's chunks, ingest takes
  every delta) and answers again.
* **Per round**: entities and triples of the build (manifest), the share of withheld triples
  the build holds — *strict*: the same (head, relation, tail), the relation through the
  build's ``relation_map`` (SCOS may rename it); *pair*: head and tail joined by any relation
  either way, because a delta triple is written with the relation the sub-question asked, not
  the withheld phrase — the round's log records by kind and the bridge entities they name,
  the refresh's sub-questions (in the log, enriched — of them re-opened at deeper passages —,
  answered; the two counts in between added with bridges, the measures unchanged) and delta
  triples (new, in all; and, added with them, the aliases — names questions wrote that nothing
  linked, given to the entity they name — new and in all), context recall, EM, F1-SQuAD,
  calls/q and tok/q (common.metrics via evaluation.runner; reader none makes no call) and
  the round's wall time (build + answers); added since, in ``result.json`` only: the answers'
  links by method and the distinct qualified-form links (span, entity), for a precision count.
* **Arms** on the same questions and dump, each its own store (``--arms``; default the first):
  ``feedback-precomputed``; ``no-feedback`` (the same rebuilds with ``query.feedback=false``:
  the log stays empty, every refresh enriches nothing — where it is not run, the no-feedback
  row is round 0: a rebuild with an empty log reads the same inputs, seeded);
  ``feedback-offline``; ``feedback-topic-only`` (as ``feedback-precomputed`` with no bridge
  entities and no re-opened sub-question: the loop as it was before them, on the same code);
  ``feedback-questions`` (as ``feedback-precomputed`` with ``query.feedback_questions`` on:
  the log keeps each question's text, so a record's topic mentions are retrieved by the
  question's own words instead of the bare name — the second hop's words, e.g. the film an
  actor plays in — while missing facts and bridges are retrieved as before; measured as the
  precomputed arm, its effect read as the difference between the two at each round);
  and the two **online** arms (evaluation/tcr_qf.py), answered on the
  no-feedback arm's round-0 build (built by them when missing): ``tcr-qf`` — each question's
  own loop (answer → missing_record → the ``k`` passages nearest each sub-question,
  ``precomputed`` extraction from the full file, as the oracle arm → an in-memory overlay →
  answer again) up to ``tcr_qf.max_rounds`` (I_max, 3) answers or until nothing is missing or
  a round finds nothing new; ``answer-driven`` — the same loop with the triples extracted by
  spaCy (``offline``) from the answer and the knowledge lines its reader was given instead of
  from retrieved passages. An online row counts every round's calls and tokens, scores the
  last answer, and counts as recovered the withheld triples the build or the union of the
  questions' overlays holds (each overlay lives for its question only; the store is never
  written), with the answers a question took and why its loop stopped.

    python -m bench.feedback_rounds --questions 20 --rounds 0 \\
        --arms no-feedback,tcr-qf,answer-driven --work /tmp/lokg-tcrqf

Rounds resume: a finished round (``WORK/<arm>/round-<r>/result.json``) is read back, a built
but unanswered one is answered (the runner resumes per question); ``WORK/settings.json``
holds every setting but ``--rounds`` and a changed one refuses the directory (an arm added to
the script since is added to it: the arms already run keep their overrides); an online arm
is read back from ``WORK/<arm>/result.json``. Output: the Markdown tables (``--markdown
FILE``; the online arms in a table of their own), ``--json``, and
``WORK/feedback-rounds.png`` (the rounds).
"""

from __future__ import annotations

import argparse
import json
import random
import shlex
import sys
import time
from pathlib import Path

from bench.common import answer_all
from lokg.testing import SHARED_DATA

ARMS = {
    "feedback-precomputed": ["feedback_enrich.backend=precomputed"],
    "no-feedback": ["query.feedback=false"],
    "feedback-offline": ["feedback_enrich.backend=offline"],
    # the loop before bridges and re-opening, on today's code: the topic and chain stops only
    "feedback-topic-only": ["feedback_enrich.backend=precomputed", "query.feedback_bridges=0",
                            "feedback_enrich.max_passages=3"],
    # the question text kept in the log: a topic mention is retrieved by the question's words
    "feedback-questions": ["feedback_enrich.backend=precomputed", "query.feedback_questions=true"],
    "tcr-qf": ["query.feedback=false", "feedback_enrich.backend=precomputed"],
    "answer-driven": ["query.feedback=false", "feedback_enrich.backend=offline"],
}
#: The online arms (evaluation/tcr_qf.py): the source of their triples. They answer over the
#: no-feedback arm's round-0 build, each question in its own loop on an in-memory overlay.
ONLINE = {"tcr-qf": "passages", "answer-driven": "answer"}
#: The learned stages are not what this measures: fewer epochs than the defaults (100, 50).
CHEAP = ["transe.epochs=20", "gat.epochs=10", "spark.shuffle_partitions=2"]
#: Every round's build stays in its store (the default keeps 3 before CURRENT), so that
#: ``bench/rounds_diff.py --reanswer`` can answer each of them again with another runtime — a
#: runtime change measured on the same graphs, free of the rebuilds' learned-stage noise.
KEEP = ["publish.keep=99"]
OPENIE = "musique-openie/openie_gpt-3.5-turbo-1106.json"
QUESTIONS = "musique-openie/questions.json"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--questions", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--withhold", type=float, default=0.3)
    parser.add_argument("--rounds", type=int, default=5, help="refresh rounds after round 0")
    parser.add_argument("--arms", default="feedback-precomputed")
    parser.add_argument("--data", type=Path, default=SHARED_DATA)
    parser.add_argument("--work", type=Path, default=Path("/tmp/lokg-rounds"))
    parser.add_argument("--markdown", type=Path, help="also write the table here")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    parser.add_argument("--llm", default="none",
                        help="the reader of every answer (runtime LLM backend; default none)")
    parser.add_argument("--no-progress", action="store_true")
    args = parser.parse_args(argv)
    args.arms = [a for a in args.arms.split(",") if a]
    unknown = [a for a in args.arms if a not in ARMS]
    if unknown or not args.arms:
        parser.error(f"--arms: {unknown or 'none'}; choose from {', '.join(ARMS)}")
    return args


# ---- the sparsified subset --------------------------------------------------------------------
def folded(triple) -> tuple[str, str, str] | None:
    """A triple's keys as triple_extract folds them; None when the stage would drop it."""
    from lokg.text.triple_extract import as_triple, entity_key, relation_key

    if as_triple(triple) is None:
        return None
    key = (entity_key(triple[0]), relation_key(triple[1]), entity_key(triple[2]))
    return key if all(key) and key[0] != key[2] else None


def withhold(docs: list[dict], share: float, seed: int) -> tuple[list[dict], list[tuple]]:
    """The docs without a seeded ``share`` of their distinct folded triples, and those."""
    distinct = sorted({k for d in docs for t in d.get("extracted_triples") or ()
                       if (k := folded(t)) is not None})
    gone = set(random.Random(seed).sample(distinct, round(share * len(distinct))))
    sparse = [{**d, "extracted_triples": [t for t in d.get("extracted_triples") or ()
                                          if folded(t) not in gone]} for d in docs]
    return sparse, sorted(gone)


def prepare(args: argparse.Namespace) -> dict:
    """Write the subset (questions, corpus dump, full and sparse OpenIE, the withheld triples)
    under WORK once; return their paths and the withheld triples."""
    from lokg.evaluation.text_datasets import load_reading_file, write_corpus

    work = args.work
    files = {"questions": work / "questions.json", "dump": work / "dump",
             "full": work / "openie_full.json", "sparse": work / "openie_sparse.json",
             "withheld": work / "withheld.json"}
    if not files["withheld"].is_file():
        records = json.loads((args.data / QUESTIONS).read_text(encoding="utf-8"))
        chosen = random.Random(args.seed).sample(records, args.questions)
        files["questions"].write_text(json.dumps(chosen), encoding="utf-8")
        reading = load_reading_file(files["questions"], "musique")
        write_corpus(reading.documents, files["dump"] / "corpus.jsonl")
        ids = {d.id for d in reading.documents}
        docs = [d for d in json.loads((args.data / OPENIE).read_text(encoding="utf-8"))["docs"]
                if _doc_id(d) in ids]
        sparse, gone = withhold(docs, args.withhold, args.seed)
        for name, subset in (("full", docs), ("sparse", sparse)):
            files[name].write_text(json.dumps({"docs": subset}), encoding="utf-8")
        files["withheld"].write_text(json.dumps(gone), encoding="utf-8")
    return {**files, "reading": load_reading_file(files["questions"], "musique"),
            "withheld_triples": [tuple(t) for t in json.loads(files["withheld"].read_text())]}


def _doc_id(doc: dict) -> str:
    from lokg.text.chunking import content_id

    return content_id(doc.get("title", ""), doc.get("text", ""))


def check_settings(args: argparse.Namespace) -> None:
    """Record the settings in WORK, or refuse a WORK made with other ones. An arm this
    script defines that WORK's record lacks (one added since) is added to the record; an arm
    both know with other overrides refuses, as any other changed setting does."""
    settings = {"questions": args.questions, "seed": args.seed, "withhold": args.withhold,
                "data": str(args.data.resolve()), "cheap": CHEAP, "arms": ARMS}
    if args.llm != "none":  # a WORK of the reader none (the first runs) stays valid
        settings["llm"] = args.llm
    path = args.work / "settings.json"
    if path.is_file():
        before = json.loads(path.read_text(encoding="utf-8"))
        known = before.get("arms", {})
        changed = sorted(k for k in {*settings, *before} - {"arms"}
                         if before.get(k) != settings.get(k))
        changed += [f"arms.{arm}" for arm in sorted(set(known) & set(ARMS))
                    if known[arm] != ARMS[arm]]
        if changed:
            raise SystemExit(f"error: {args.work} was made with other settings ({', '.join(changed)});"
                             " choose another --work")
        settings["arms"] = {**known, **ARMS}
    args.work.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(settings, indent=2), encoding="utf-8")


def build_config(setup: dict, arm: str) -> dict:
    from lokg.pipeline.config import load_config

    return load_config(None, ["ingest.format=docs", "triple_extract.backend=precomputed",
                              f"triple_extract.precomputed_file={setup['sparse']}",
                              f"feedback_enrich.precomputed_file={setup['full']}",
                              *CHEAP, *KEEP, *ARMS[arm]])


# ---- one round --------------------------------------------------------------------------------
def run_round(arm_dir: Path, number: int, config: dict, setup: dict, progress: bool) -> dict:
    """Round ``number`` of one arm: (re)build, answer, measure; read back when finished."""
    from lokg.pipeline.driver import build
    from lokg.runtime.contract import Store

    here = arm_dir / f"round-{number}"
    done = here / "result.json"
    if done.is_file():
        return json.loads(done.read_text(encoding="utf-8"))
    here.mkdir(parents=True, exist_ok=True)
    store, built = Store(arm_dir / "store"), here / "build.json"
    if not built.is_file():
        started = time.perf_counter()
        new = build(str(setup["dump"]), str(store.root), config, log=lambda _: None)
        built.write_text(json.dumps({"build_id": new.build_id,
                                     "build_s": round(time.perf_counter() - started, 1)}))
    meta = json.loads(built.read_text(encoding="utf-8"))
    if store.current_id() != meta["build_id"]:
        raise SystemExit(f"error: {store.root} CURRENT is not round {number}'s build "
                         f"{meta['build_id']}; remove {arm_dir} to start the arm again")
    started = time.perf_counter()
    summary = answer_all(store.root, setup["reading"].dataset.questions, here / "run", progress,
                         setup["llm"])
    result = {"round": number, **measure(store.build(meta["build_id"]), setup),
              **{k: summary[k] for k in ("context_recall", "EM", "F1-SQuAD", "calls/q",
                                         "tok/q", "n")},
              "log": round_log(store.root, meta["build_id"]),
              "links": link_methods(here / "run"),
              "wall_s": round(meta["build_s"] + time.perf_counter() - started, 1)}
    done.write_text(json.dumps(result, indent=2), encoding="utf-8")
    return result


def run_online(work: Path, arm: str, setup: dict, progress: bool) -> dict:
    """An online arm on the no-feedback arm's round-0 build (built here when missing): every
    question through the loop; the withheld triples the build and the union of the questions'
    overlays hold; how many answers a question took and why its loop stopped."""
    from lokg.evaluation.tcr_qf import STOPS
    from lokg.runtime.contract import Store

    done = work / arm / "result.json"
    if done.is_file():
        return json.loads(done.read_text(encoding="utf-8"))
    base = work / "no-feedback"
    run_round(base, 0, build_config(setup, "no-feedback"), setup, progress)
    build_id = json.loads((base / "round-0" / "build.json").read_text())["build_id"]
    started, out = time.perf_counter(), work / arm / "run"
    summary = answer_all(base / "store", setup["reading"].dataset.questions, out, progress,
                         setup["llm"], build_id, (ONLINE[arm], build_config(setup, arm)))
    loops = [json.loads(line)["details"]["online"]
             for line in (out / "lokg" / "predictions.jsonl").open(encoding="utf-8")]
    overlay = {tuple(t) for loop in loops for t in loop["overlay_triples"]}
    result = {"arm": arm, **measure(Store(base / "store").build(build_id), setup, overlay),
              **{k: summary[k] for k in ("context_recall", "EM", "F1-SQuAD", "calls/q",
                                         "tok/q", "n")},
              "answers/q": sum(loop["rounds"] for loop in loops) / len(loops),
              "stopped": {why: sum(loop["stopped"] == why for loop in loops) for why in STOPS},
              "asked/q": sum(sum(loop["asked"]) for loop in loops) / len(loops),
              "overlay_triples": len(overlay),
              "wall_s": round(time.perf_counter() - started, 1)}
    done.write_text(json.dumps(result, indent=2), encoding="utf-8")
    return result


def measure(build, setup: dict, overlay: set[tuple[str, str, str]] = frozenset()) -> dict:
    """The build's size, its feedback_enrich/ingest report, and the withheld triples it (and
    the ``overlay`` triples, by keys) holds."""
    from lokg.text.feedback_published import Published

    tables, stages = build.manifest["tables"], build.manifest["report"]["stages"]
    enrich, ingest = stages["feedback_enrich"], stages["ingest"]
    pub = Published(build, None)
    canonical = dict(zip(*(build.read("relation_map")[c].to_pylist()
                           for c in ("name", "canonical_name"))))
    t = build.read("triples")
    held = {(pub.keys[s], pub.relations[r], pub.keys[o])
            for s, r, o in zip(*(t[c].to_pylist() for c in ("s", "r", "o")))} | set(overlay)
    pairs = {(s, o) for s, _, o in held} | {(o, s) for s, _, o in held}
    strict = pair = 0
    for h, r, o in setup["withheld_triples"]:
        s_key, o_key = pub.by_form.get(h, h), pub.by_form.get(o, o)
        strict += (s_key, canonical.get(r, r), o_key) in held
        pair += (s_key, o_key) in pairs
    n = len(setup["withheld_triples"])
    return {"build_id": build.build_id, "entities": tables["entities"]["rows"],
            "triples": tables["triples"]["rows"], "withheld": n,
            "recovered_strict": round(strict / n, 4), "recovered_pair": round(pair / n, 4),
            "sub_questions": enrich.get("sub_questions", 0), "enriched": enrich.get("enriched", 0),
            "answered": enrich.get("answered", 0), "reopened": enrich.get("reopened", 0),
            "delta_new": enrich.get("delta_triples_new", 0),
            "delta_triples": enrich.get("delta_triples", 0),
            "aliases_new": enrich.get("aliases_new", 0),
            "delta_aliases": enrich.get("delta_aliases", 0),
            "feedback_edges_added": ingest.get("feedback_edges_added", 0)}


def round_log(store: Path, build_id: str) -> dict:
    """The feedback records this round's answers wrote, by kind."""
    from lokg.runtime.feedback import KINDS, log_dir, read_log

    records = [r for r in read_log(log_dir(store)).records if r["build_id"] == build_id]
    return {kind: sum(r["kind"] == kind for r in records) for kind in KINDS} | \
        {"missing_facts": sum(len(r["missing"]) for r in records),
         "bridges": sum(len(r.get("bridges", ())) for r in records),
         "unlinked": sum(len(r.get("unlinked", ())) for r in records)}


def link_methods(run: Path) -> dict:
    """How the round's answers linked, by method (linker.Link.method; ``qualified``: the
    names that qualify a written name, whose wrong ones a precision count reads here), and
    the distinct (span, entity) pairs of the qualified ones."""
    counts: dict[str, int] = {}
    qualified: set[tuple[str, str]] = set()
    for line in (run / "lokg" / "predictions.jsonl").open(encoding="utf-8"):
        for link in json.loads(line)["details"].get("linked", ()):
            counts[link["method"]] = counts.get(link["method"], 0) + 1
            if link["method"] == "qualified":
                qualified.add((link["span"], link["name"]))
    return {"by_method": counts, "qualified": sorted(qualified)}


# ---- output -----------------------------------------------------------------------------------
HEADER = ("| arm | round | entities | triples | withheld recovered (strict / pair) | logged "
          "(chain_stop / no_entity / no_derivation; bridges) | sub-q in log → enriched "
          "(re-opened) → answered | "
          "delta new (all) | context recall | EM | F1 | calls/q | tok/q | wall s |")


def table(results: dict[str, list[dict]]) -> str:
    rows = [HEADER, "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|"]
    for arm, rounds in results.items():
        for r in rounds:
            log = r["log"]
            rows.append(
                f"| {arm} | {r['round']} | {r['entities']} | {r['triples']} | "
                f"{r['recovered_strict']:.3f} / {r['recovered_pair']:.3f} | "
                f"{log['chain_stop']} / {log['no_entity']} / {log['no_derivation']}; "
                f"{log.get('bridges', 0)} | {r['sub_questions']} → {r['enriched']} "
                f"({r.get('reopened', 0)}) → {r['answered']} | "
                f"{r['delta_new']} ({r['delta_triples']}){_aliases(r)} | "
                f"{r['context_recall']:.3f} | "
                f"{r['EM']:.3f} | {r['F1-SQuAD']:.3f} | {r['calls/q']:.2f} | {r['tok/q']:.1f} | "
                f"{r['wall_s']:.0f} |")
    return "\n".join(rows) + "\n"


def _aliases(r: dict) -> str:
    """The delta's aliases (names questions wrote that nothing linked), where there are any."""
    return f"; aliases {r['aliases_new']} ({r['delta_aliases']})" if r.get("delta_aliases") \
        else ""


ONLINE_HEADER = ("| arm | answers/q | sub-q tried/q | stopped (nothing missing / I_max / "
                 "nothing new to ask / nothing found) | overlay triples (all questions) | "
                 "withheld recovered (strict / pair) | context recall | EM | F1 | calls/q | "
                 "tok/q | wall s |")


def online_table(online: dict[str, dict]) -> str:
    from lokg.evaluation.tcr_qf import STOPS

    rows = ["", ONLINE_HEADER, "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|"]
    for arm, r in online.items():
        rows.append(
            f"| {arm} | {r['answers/q']:.2f} | {r['asked/q']:.2f} | "
            f"{' / '.join(str(r['stopped'][why]) for why in STOPS)} | {r['overlay_triples']} | "
            f"{r['recovered_strict']:.3f} / {r['recovered_pair']:.3f} | "
            f"{r['context_recall']:.3f} | {r['EM']:.3f} | {r['F1-SQuAD']:.3f} | "
            f"{r['calls/q']:.2f} | {r['tok/q']:.1f} | {r['wall_s']:.0f} |")
    return "\n".join(rows) + "\n"


def plot(results: dict[str, list[dict]], path: Path) -> Path:
    """Recovered share (pair) and context recall over rounds, one line per arm."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    for arm, rounds in results.items():
        x = [r["round"] for r in rounds]
        axes[0].plot(x, [r["recovered_pair"] for r in rounds], marker="o", label=arm)
        axes[1].plot(x, [r["context_recall"] for r in rounds], marker="o", label=arm)
    for ax, title in zip(axes, ("withheld triples recovered (pair)", "context recall")):
        ax.set_title(title)
        ax.set_xlabel("refresh round")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    command = shlex.join(["python", "-m", "bench.feedback_rounds", *(argv or sys.argv[1:])])
    check_settings(args)
    setup = {**prepare(args), "llm": args.llm}
    print(f"{command}\n{args.questions} questions, {len(setup['reading'].documents)} documents, "
          f"{len(setup['withheld_triples'])} triples withheld", file=sys.stderr)
    results, online = {}, {}
    for arm in args.arms:
        if arm in ONLINE:
            online[arm] = run_online(args.work, arm, setup, not args.no_progress)
            print(f"{arm}: {online[arm]['wall_s']} s", file=sys.stderr)
            continue
        config = build_config(setup, arm)
        results[arm] = []
        for number in range(args.rounds + 1):
            results[arm].append(run_round(args.work / arm, number, config, setup,
                                          not args.no_progress))
            print(f"{arm} round {number}: {results[arm][-1]['wall_s']} s", file=sys.stderr)
    text = (table(results) if results else "") + (online_table(online) if online else "")
    if args.markdown:
        args.markdown.write_text(text, encoding="utf-8")
    if results:
        print(f"plot: {plot(results, args.work / 'feedback-rounds.png')}", file=sys.stderr)
    print(json.dumps({**results, **online}, indent=2) if args.json else text,
          end="\n" if args.json else "")
    return 0


if __name__ == "__main__":
    sys.exit(main())
