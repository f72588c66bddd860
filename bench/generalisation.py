"""Relation knowledge on held-out graphs: the generalisation protocol, end to end.

    python -m bench.generalisation --work /tmp/lokg-gen
    python -m bench.generalisation --triples 3000 --namings dotted,plain --json out.json

Every run is ``lokg eval --policy route --llm none`` (``evaluation.cli.run_eval``, whose
``--build`` path builds a missing store), methods ``lokg`` and, zero-shot, ``kaping``:

1. **In-domain, per naming scheme** (``--namings``): a synthetic KG of ``--triples`` edges
   (``pipeline.synth.generate(naming=...)``), built with its labelled train/dev questions
   (``pipeline.synth.labelled_overrides``), asked its test split.
2. **Transfer, unseen wording**: the same test questions (same graph, topics, chains, answers)
   in the held-out wording — a second dump with ``test_wording="heldout"`` whose kg.tsv is the
   first's, byte for byte — against the same store.
3. **Transfer PQ-2H ↔ PQ-3H** (when ``--pathquestion`` holds pq-2h/ and pq-3h/): a store of
   both KBs (their union kb.txt; either dataset's topics alone miss many of the other's
   entities) whose relation knowledge and GAT paths learn from one dataset's train/dev, asked
   both datasets' test splits: in-domain and transfer.
4. **Zero-shot inverse hops**: plain naming, metaqa-style 1/2/3-hop questions (hops may walk a
   relation backwards: gold paths carry ``~``), built with **no** labelled questions; H@1 per
   hop count, and within it of the questions with and without an inverse hop.
   ``--zero-shot-wordings train,wild`` asks the same questions again in other test wordings
   (``wild``: as varied as people ask, ``pipeline.synth_wild``), against the same store; per
   wording the zero-call coverage (share answered from the graph) and its precision, the share
   of questions whose knowledge holds a gold answer and the knowledge tokens per question.

Every step is asked once per ``--entities`` mode (default ``gold,link``: the topic entities
given, or found by the linker). Per row: n, H@1, the share of questions the route answered from
the graph (``derived``) and H@1 of those; for method lokg what linking loses (the breakdown's
share of questions linked wrong, and of those lost with it, ``first_miss`` = linking) and, from
a second run with ``--policy precision``, the share of questions the precision gate passes and
H@1 of those (its precision). Resumable, cached per
directory under ``--work``: a dump directory is named by its options and generated once (its
manifest.json is written last), a store is built only when it has no published build, and
``run_eval`` resumes a run directory by question id (a dump, store or run made by older code
is reused as it is: remove its directory to redo it). ``--set`` adds build overrides to every
store (an encoder to compare, say), so each setting needs its own ``--work``. The Markdown goes
to stdout (and ``--markdown``), the rows to ``--json`` (default WORK/results.json).
"""

from __future__ import annotations

import argparse
import itertools
import json
import shlex
import sys
from collections.abc import Mapping
from pathlib import Path

from lokg.common.metrics import normalise_answer
from lokg.pipeline.synth import NAMINGS, generate, labelled_overrides
from lokg.pipeline.synth_wording import WORDINGS

PQ_DATASETS = ("pq-2h", "pq-3h")
PRECISION = "lokg@precision"  # evaluate's key for method lokg under policy precision
HEADER = ("| setting | graph | relation knowledge from | asked | entities | method | n | H@1 "
          "| derived | H@1 of derived | linked wrong | lost to linking | linked more (lost) "
          "| precision gate passes | H@1 of those |")
KEYS = ("setting", "graph", "trained", "asked", "entities", "method", "n", "H@1", "derived",
        "derived_H@1", "linked_wrong", "lost_linking", "linked_more", "gate", "gate_H@1")


def ensure_dump(path: Path, **options) -> Path:
    """The dump at ``path``, generated unless complete (its options are in its name)."""
    if not (path / "manifest.json").is_file():
        print(f"generating {path}", file=sys.stderr)
        generate(path, **options)
    return path


def evaluate(args, *, dataset: str, store: Path, out: Path, methods: str = "lokg",
             entities: str = "gold", overrides=(), kb: Path | None = None, split=None) -> dict:
    """One ``lokg eval --policy route --llm none`` run (building ``store`` if missing), and for
    method lokg one with ``--policy precision`` beside it (``OUT-precision``); the
    per-question records of each method, the second run's under :data:`PRECISION`."""
    from lokg.evaluation.cli import command_line, run_eval

    options = dict(dataset=dataset, split=split, store=str(store), methods=methods, llm="none",
                   policy="route", entities=entities, out=str(out), build=True,
                   kb=str(kb) if kb else None, overrides=[*overrides, *args.set],
                   limit=args.limit)
    runs = [(options, methods.split(","), out)]
    if "lokg" in methods.split(","):
        gated = out.with_name(f"{out.name}-precision")
        runs.append(({**options, "methods": "lokg", "policy": "precision", "out": str(gated)},
                     [PRECISION], gated))
    records = {}
    for opts, names, where in runs:
        print(f"== {command_line(**opts)}", file=sys.stderr)
        run_eval(**opts, progress=not args.no_progress, log=lambda m: print(m, file=sys.stderr))
        for m, name in zip(opts["methods"].split(","), names):
            records[name] = [json.loads(line) for line in (where / m / "predictions.jsonl")
                             .read_text(encoding="utf-8").splitlines()]
    return records


def run_name(base: str, entities: str) -> str:
    """A run directory's name: ``base`` for gold topic entities (the name runs had before
    there were link rows, so they resume), ``base-link`` for linked ones."""
    return base if entities == "gold" else f"{base}-{entities}"


def figures(records: list[dict], gated: list[dict] | None = None) -> dict:
    """n, H@1, the derived share and H@1 of the derived answers of some predictions; where
    they carry a breakdown (method lokg) the shares of questions linked wrong and lost to
    linking, and of those linked right with more entities than their topics (the linker's
    ambiguity, which the derivation walks from too; its questions lost in brackets); with
    ``gated`` (the same questions under policy precision) the share the precision gate
    passes and H@1 of those (the breakdown's ``gate_passed``)."""
    derived = [r for r in records if ((r["details"] or {}).get("route") or {}).get("source")
               == "derived"]
    n = len(records)
    out = {"n": n, "H@1": sum(r["scores"]["H@1"] for r in records) / n if n else None,
           "derived": len(derived) / n if n else None,
           "derived_H@1": (sum(r["scores"]["H@1"] for r in derived) / len(derived)
                           if derived else None)}
    if n and all("breakdown" in r for r in records):
        out["linked_wrong"] = sum(r["breakdown"]["linked"] is False for r in records) / n
        out["lost_linking"] = sum(r["breakdown"]["first_miss"] == "linking"
                                  and not r["scores"]["H@1"] for r in records) / n
        more = [r for r in records if r["breakdown"]["linked"]
                and len(r["details"].get("linked") or ()) > len(r.get("topic_entities") or ())]
        out["linked_more"] = f"{len(more) / n:.3f} ({sum(not r['scores']['H@1'] for r in more)})"
    if gated is not None:
        passed = [r for r in gated if r["breakdown"]["gate_passed"]]
        out["gate"] = len(passed) / len(gated) if gated else None
        out["gate_H@1"] = (sum(r["scores"]["H@1"] for r in passed) / len(passed)
                           if passed else None)
    return out


def synthetic_rows(args, work: Path) -> list[dict]:
    """Steps 1 and 2: per naming, in-domain and the unseen-wording transfer, per entities
    mode."""
    rows = []
    for naming in args.namings.split(","):
        root = work / f"synth-{naming}-{args.triples}t-s{args.seed}-q{args.questions}"
        options = dict(n_triples=args.triples, seed=args.seed, n_questions=args.questions,
                       naming=naming)
        dump = ensure_dump(root / "dump", **options)
        heldout = ensure_dump(root / "dump-heldout", **options, test_wording="heldout")
        graphs = {json.loads((d / "manifest.json").read_text())["files"]["kg.tsv"]
                  for d in (dump, heldout)}
        if len(graphs) != 1:
            sys.exit(f"{heldout}: not the graph of {dump} (kg.tsv differs)")
        build = dict(store=root / "store", kb=dump, overrides=labelled_overrides(dump))
        for (label, asked), entities in itertools.product(
                (("in-domain", dump), ("unseen wording", heldout)), args.entities.split(",")):
            runs = evaluate(args, dataset=f"synth:{asked / 'test.jsonl'}", entities=entities,
                            out=root / "runs" / f"{asked.name}-{entities}", **build)
            rows.append({"setting": label, "graph": f"synth {naming}", "trained": "train/dev",
                         "asked": f"test ({'held-out' if asked == heldout else 'train'} "
                                  "wording)", "entities": entities, "method": "lokg",
                         **figures(runs["lokg"], runs[PRECISION])})
    return rows


def union_kb(data: Path, work: Path) -> Path:
    """A PathQuestion dump of both datasets' kb.txt lines (first occurrence kept)."""
    union = work / "pathquestion-union"
    if not (union / "kb.txt").is_file():
        union.mkdir(parents=True, exist_ok=True)
        lines = [line for name in PQ_DATASETS
                 for line in (data / name / "kb.txt").read_text(encoding="utf-8").splitlines()]
        (union / "kb.tmp").write_text("\n".join(dict.fromkeys(lines)) + "\n", encoding="utf-8")
        (union / "kb.tmp").rename(union / "kb.txt")
    return union


def pathquestion_rows(args, work: Path) -> list[dict]:
    """Step 3: relation knowledge from one PathQuestion dataset, asked both test splits."""
    data = Path(args.pathquestion)
    if not all((data / name / "kb.txt").is_file() for name in PQ_DATASETS):
        print(f"{data}: no {' and '.join(PQ_DATASETS)}; PathQuestion transfer skipped",
              file=sys.stderr)
        return []
    kb, rows = union_kb(data, work), []
    for trained in PQ_DATASETS:
        source = data / trained
        overrides = [f"relation_knowledge.questions={source / 'train.txt'}",
                     f"relation_knowledge.dev_questions={source / 'dev.txt'}",
                     f"gat.questions={source / 'train.txt'}"]
        for asked, entities in itertools.product(PQ_DATASETS, args.entities.split(",")):
            runs = evaluate(args, dataset=f"pathquestion:{data / asked}", split="test",
                            store=work / f"pathquestion-store-{trained}", kb=kb,
                            overrides=overrides, entities=entities,
                            out=work / "pathquestion-runs" / run_name(f"{trained}-on-{asked}",
                                                                      entities))
            rows.append({"setting": "in-domain" if asked == trained else "transfer",
                         "graph": "PQ-2H ∪ PQ-3H KB", "trained": f"{trained} train/dev",
                         "asked": f"{asked} test", "entities": entities, "method": "lokg",
                         **figures(runs["lokg"], runs[PRECISION])})
    return rows


def zero_shot_dumps(args, root: Path) -> dict[str, Path]:
    """The zero-shot dumps by test wording (``--zero-shot-wordings``): the same graph and
    questions, the test split asked in each wording (``train``: the dump of old, ``dump``)."""
    options = dict(n_triples=args.triples, seed=args.seed, n_questions=args.zero_shot_questions,
                   naming="plain", question_style="metaqa")
    dumps = {"train": ensure_dump(root / "dump", **options)}
    for wording in args.zero_shot_wordings.split(","):
        if wording not in dumps:
            dumps[wording] = ensure_dump(root / f"dump-{wording}", **options,
                                         test_wording=wording)
    graphs = {json.loads((d / "manifest.json").read_text())["files"]["kg.tsv"]
              for d in dumps.values()}
    if len(graphs) != 1:
        sys.exit(f"{root}: the zero-shot dumps' graphs differ (kg.tsv)")
    return {w: dumps[w] for w in args.zero_shot_wordings.split(",")}


def zero_shot_rows(args, work: Path) -> list[dict]:
    """Step 4: a metaqa-style graph in plain naming, no labelled questions, H@1 per hop, per
    test wording and entities mode; every wording asks one store (the train dump's graph)."""
    root = work / f"zero-shot-{args.triples}t-s{args.seed}-q{args.zero_shot_questions}"
    rows = []
    for wording, dump in zero_shot_dumps(args, root).items():
        questions = {q["id"]: q for q in map(json.loads, (dump / "test.jsonl").read_text(
            encoding="utf-8").splitlines())}
        base = "route" if wording == "train" else f"route-{wording}"
        for entities in args.entities.split(","):
            runs = evaluate(args, dataset=f"synth:{dump / 'test.jsonl'}", store=root / "store",
                            kb=root / "dump", methods=args.zero_shot_methods,
                            entities=entities, out=root / "runs" / run_name(base, entities))
            gated = runs.pop(PRECISION, None)
            rows += [{**row, "entities": entities}
                     for method, records in runs.items()
                     for row in hop_rows(method, records, gated if method == "lokg" else None,
                                         questions, wording)]
    return rows


def knowledge_figures(records: list[dict]) -> dict:
    """The share of questions whose injected triples have a gold answer as an endpoint
    (``gold_in_knowledge``: what a reader could answer from) and the mean knowledge tokens."""
    def has_gold(r):
        ends = {normalise_answer(t[k]) for t in r.get("triples") or () for k in ("s", "o")}
        return any(normalise_answer(g) in ends for g in r["gold"])

    n = len(records)
    return {"gold_in_knowledge": sum(map(has_gold, records)) / n if n else None,
            "knowledge_tok": (sum(r["tokens"]["knowledge"] for r in records) / n
                              if n else None)}


def hop_rows(method: str, records: list[dict], gated: list[dict] | None,
             questions: Mapping[str, dict], wording: str = "train") -> list[dict]:
    """A zero-shot run's rows: per hop count and for all of them, with H@1 of the questions
    whose chain walks a relation backwards (inverse) and of the others (forward), what the
    knowledge holds and costs (:func:`knowledge_figures`)."""
    graph = "synth plain, metaqa" + ("" if wording == "train" else f", {wording} wording")
    rows = []
    for hops in sorted({q["hops"] for q in questions.values()}) + [None]:
        def asked(r):
            return hops is None or questions[r["id"]]["hops"] == hops

        part = [r for r in records if asked(r)]
        gate = None if gated is None else [r for r in gated if asked(r)]
        by_kind = {kind: figures([r for r in part if questions[r["id"]]["inverse"]
                                  == (kind == "inverse")]) for kind in ("inverse", "forward")}
        rows.append({"setting": "zero-shot", "graph": graph, "trained": "nothing",
                     "wording": wording,
                     "asked": f"test, {f'{hops}-hop' if hops else 'all hop counts'}",
                     "method": method, **figures(part, gate), **knowledge_figures(part),
                     **{f"{k} {kind}": v[k] for kind, v in by_kind.items()
                        for k in ("n", "H@1")}})
    return rows


def cell(value) -> str:
    return "—" if value is None else f"{value:.3f}" if isinstance(value, float) else str(value)


def markdown(rows: list[dict], command: str) -> str:
    """The main table, then the zero-shot table with the inverse / forward split."""
    lines = ["Regenerate with:", "", f"    {command}", "", HEADER,
             "|---" * 6 + "|--:" * (len(KEYS) - 6) + "|"]
    lines += ["| " + " | ".join(cell(r.get(k)) for k in KEYS) + " |" for r in rows]
    zero = [r for r in rows if r["setting"] == "zero-shot"]
    if zero:
        lines += ["", "Zero-shot, by whether the chain walks a relation backwards:", "",
                  "| method | entities | asked | H@1 inverse (n) | H@1 forward (n) |",
                  "|---|---|---|--:|--:|"]
        lines += [f"| {r['method']} | {r['entities']} | {r['asked']} | {cell(r['H@1 inverse'])} "
                  f"({r['n inverse']}) | {cell(r['H@1 forward'])} ({r['n forward']}) |"
                  for r in zero]
        lines += ["", "Zero-shot, per test wording: route H@1, zero-call coverage (answered "
                  "from the graph, ``derived``) and its precision, the share of questions whose "
                  "knowledge holds a gold answer, knowledge tokens per question:", "",
                  "| method | entities | wording | asked | n | H@1 | zero-call | "
                  "H@1 of zero-call | gold in knowledge | knowledge tok/q |",
                  "|---|---|---|---|--:|--:|--:|--:|--:|--:|"]
        lines += [f"| {r['method']} | {r['entities']} | {r.get('wording', 'train')} | "
                  f"{r['asked']} | " + " | ".join(cell(r.get(k)) for k in (
                      "n", "H@1", "derived", "derived_H@1", "gold_in_knowledge",
                      "knowledge_tok")) + " |" for r in zero]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", default="/tmp/lokg-gen", help="dumps, stores and runs")
    parser.add_argument("--triples", type=int, default=20_000, help="edges of each synthetic KG")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--questions", type=int, default=1000,
                        help="labelled synthetic questions (a tenth is the test split)")
    parser.add_argument("--namings", default=",".join(NAMINGS))
    parser.add_argument("--pathquestion", default=str(Path(__file__).resolve().parents[2]
                                                      / "shared" / "data" / "pathquestion"))
    parser.add_argument("--zero-shot-questions", type=int, default=3000,
                        help="metaqa questions of the zero-shot graph (a tenth is asked)")
    parser.add_argument("--zero-shot-methods", default="lokg,kaping")
    parser.add_argument("--zero-shot-wordings", default="train",
                        help="test wordings of the zero-shot questions (comma-separated: "
                             f"{', '.join(WORDINGS)}; wild: as varied as people ask)")
    parser.add_argument("--entities", default="gold,link",
                        help="topic entities of every step's runs: given (gold) and/or linked")
    parser.add_argument("--steps", default="synthetic,pathquestion,zero-shot")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="build config override for every store (repeatable), e.g. "
                             "entity_encode.model=DIR to compare encoders; stores are reused, "
                             "so give each setting its own --work")
    parser.add_argument("--limit", type=int, help="only the first N questions of each run")
    parser.add_argument("--json", help="rows as JSON (default WORK/results.json)")
    parser.add_argument("--markdown", help="also write the Markdown here")
    parser.add_argument("--no-progress", action="store_true")
    args = parser.parse_args(argv)
    import torch

    torch.set_num_threads(1)
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    steps = {"synthetic": synthetic_rows, "pathquestion": pathquestion_rows,
             "zero-shot": zero_shot_rows}
    rows = [row for step in args.steps.split(",") for row in steps[step](args, work)]
    command = shlex.join(["python", "-m", "bench.generalisation",
                          *(sys.argv[1:] if argv is None else argv)])
    text = markdown(rows, command)
    print(text)
    Path(args.json or work / "results.json").write_text(
        json.dumps({"command": command, "rows": rows}, indent=1) + "\n")
    if args.markdown:
        Path(args.markdown).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
