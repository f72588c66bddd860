"""Incremental refresh at scale: a refresh with 1 % of the triples changed against a
full build of the same final dump — per-stage time, the whole-build ratio, and equality.

    python -m bench.refresh_scale --triples 100000 --work W --json W/refresh.json \\
        --markdown W/refresh.md
    python -m bench.refresh_scale --dump /work/shared/data/fb15k237 --work W ...

The original dump (synthetic, ``pipeline.synth``, generated once into ``W/dump-N`` as
``bench/build_scale.py`` does; or ``--dump``) is copied to ``W/edited`` with a seeded
``--fraction`` of its triples removed and as many added between existing entities
(``pipeline.dump_edit.edit_dump``). Three ``lokg build`` processes, one at a time, measured
per stage as ``build_scale.py --one-process`` measures them (wall, CPU of the process tree):

1. the original dump into ``W/store`` (a full build: the store is new);
2. the edited dump into ``W/store``: the **refresh** (``refresh.mode`` auto, from 1's cache);
3. the edited dump into ``W/full-store`` with ``refresh.mode=full``: the **full** build.

Each build's rows are written to ``W/builds.json`` when it ends; ``--resume`` keeps the builds
recorded there, with their stores, and runs the rest (a 10⁶ run stopped after the refresh
finishes with the full build alone).

Per stage: full and refresh wall and CPU seconds, refresh / full, and how the refresh made
the stage (reused, partial, full: the build report). The whole build: the sums' ratio
(target ≤ 20 %). Equality of 2 and 3: every table of ``pipeline.refresh.DETERMINISTIC_TABLES``
row for row (rows as multisets, floats to 9 decimal places) but for the rows of
``pipeline.refresh.LEARNED_ROWS`` and the columns of ``pipeline.refresh.LEARNED_COLUMNS`` (they
follow warm-started TransE) — the tables of ``AFTER_MERGES`` only when the two builds merged the
same SCOS groups (they are functions of the merges; the refresh keeps the previous build's
vectors for SCOS, the full build trains cold: the report says which case, and how many groups
differ from the full and from the previous build) —, and the learned stages within
``TOLERANCE``: H@1 with reader none within
0.02 (synthetic: the dump's ``test.jsonl`` questions, ``--eval`` of them; else ``--eval``
seeded facts of the edited dump, the same asked of both stores, bench/refresh_paired_h1.py), and — reported, not
judged — the largest GAT attention difference over the edges both hold.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import time
from pathlib import Path

from bench.common import build_one_process, dump_for, table_equality
from lokg.testing import REPO

#: The learned stages' allowance: H@1 (reader none) this close.
TOLERANCE = {"H@1": 0.02}
#: Tables that are functions of the SCOS merges: compared row for row only when the refresh
#: and the full build merged the same groups (a cold and a warm TransE may not).
AFTER_MERGES = ("relations", "triples", "relation_map", "node_gain")
#: The whole-build refresh / full ratio aimed at.
TARGET_RATIO = 0.20
BUILDS = ("original", "refresh", "full")
def edited_dump(original: Path, work: Path, fraction: float, seed: int) -> tuple[Path, dict]:
    """``W/edited`` (made once; ``W/edit.json`` says what changed)."""
    from lokg.pipeline.dump_edit import edit_dump

    edited, record = work / "edited", work / "edit.json"
    if not record.is_file():
        shutil.rmtree(edited, ignore_errors=True)
        record.write_text(json.dumps(edit_dump(original, edited, fraction=fraction, seed=seed)))
    return edited, json.loads(record.read_text())


def run_builds(original: Path, edited: Path, work: Path, overrides: list[str],
               resume: bool = False) -> dict:
    """The three measured builds (module docstring), on fresh stores: build → stage rows.
    Each build's rows go to ``W/builds.json`` as it ends, so a run stopped later keeps them;
    ``resume`` keeps the builds recorded there (and their stores) and runs only the rest."""
    record = work / "builds.json"
    rows = json.loads(record.read_text()) if resume and record.is_file() else {}
    plan = {"original": (original, "store", overrides),
            "refresh": (edited, "store", overrides),
            "full": (edited, "full-store", [*overrides, "refresh.mode=full"])}
    for name in ("original", "full"):
        if name not in rows:
            shutil.rmtree(work / plan[name][1], ignore_errors=True)
    logs = work / "logs"
    logs.mkdir(exist_ok=True)
    for name in (b for b in BUILDS if b not in rows):
        dump, store, settings = plan[name]
        print(f"{name}: {dump} → {work / store}, load {os.getloadavg()}", flush=True)
        started = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime())
        rows[name] = build_one_process(dump, work / store, settings, logs / f"{name}.log")
        print(f"  {started} → {time.strftime('%H:%M:%S', time.gmtime())} UTC, "
              f"{sum(r['wall_s'] for r in rows[name]):.1f} s", flush=True)
        record.write_text(json.dumps(rows, indent=2))
    return rows


def stage_comparison(full: list[dict], refresh: list[dict], made: dict[str, str]) -> list[dict]:
    """Per stage (the full build's order): both builds' wall and CPU, refresh / full of each,
    and how the refresh made it (``start`` and ``publish`` are not stages: "—")."""
    by_stage = {r["stage"]: r for r in refresh}
    rows = []
    for f in full:
        r = by_stage.get(f["stage"], {"wall_s": 0.0, "cpu_s": 0.0})
        rows.append({"stage": f["stage"], "how": made.get(f["stage"], "—"),
                     "full_wall_s": f["wall_s"], "refresh_wall_s": r["wall_s"],
                     "full_cpu_s": f["cpu_s"], "refresh_cpu_s": r["cpu_s"],
                     "wall_ratio": _ratio(r["wall_s"], f["wall_s"]),
                     "cpu_ratio": _ratio(r["cpu_s"], f["cpu_s"])})
    return rows


def whole_build(rows: list[dict]) -> dict:
    """Sums over the stages and the refresh / full ratios, against the target."""
    sums = {k: round(sum(r[k] for r in rows), 2)
            for k in ("full_wall_s", "refresh_wall_s", "full_cpu_s", "refresh_cpu_s")}
    wall = _ratio(sums["refresh_wall_s"], sums["full_wall_s"])
    cpu = _ratio(sums["refresh_cpu_s"], sums["full_cpu_s"])
    return {**sums, "wall_ratio": wall, "cpu_ratio": cpu, "target": TARGET_RATIO,
            "meets_target": wall is not None and wall <= TARGET_RATIO}


def _ratio(part: float, whole: float) -> float | None:
    return round(part / whole, 3) if whole else None


def deterministic_part(table, name: str):
    """The table without the rows ``pipeline.refresh.LEARNED_ROWS`` and the columns
    ``LEARNED_COLUMNS`` name for it."""
    import pyarrow.compute as pc

    from lokg.pipeline.refresh import LEARNED_COLUMNS, LEARNED_ROWS

    if name in LEARNED_ROWS and LEARNED_ROWS[name][0] in table.column_names:
        column, value = LEARNED_ROWS[name]
        table = table.filter(pc.not_equal(table.column(column), value))
    return table.drop_columns([c for c in LEARNED_COLUMNS.get(name, ())
                               if c in table.column_names])


def merge_groups(relation_map) -> set[frozenset[str]]:
    """The SCOS merge groups of a relation_map table: the member names of every canonical
    relation that more than one relation maps to."""
    groups: dict[str, set[str]] = {}
    for name, canonical in zip(relation_map.column("name").to_pylist(),
                               relation_map.column("canonical_name").to_pylist()):
        groups.setdefault(canonical, set()).add(name)
    return {frozenset(g) for g in groups.values() if len(g) > 1}


def attention_difference(one, other) -> dict:
    """Edges (s, r, o, inverse) both tables hold, those only one does, and the largest
    attention difference over the shared ones."""
    import numpy as np

    keys = ["s", "r", "o", "inverse"]
    joined = one.join(other, keys=keys, right_suffix="_full", join_type="inner")
    diff = np.abs(joined.column("attention").to_numpy()
                  - joined.column("attention_full").to_numpy())
    return {"shared": joined.num_rows, "only_refresh": one.num_rows - joined.num_rows,
            "only_full": other.num_rows - joined.num_rows,
            "max_attention_diff": float(diff.max()) if len(diff) else 0.0}


def h1_reader_none(stores: dict[str, Path], dump: Path, n: int, seed: int,
                   work: Path) -> dict:
    """H@1 with reader none of each store, on one question set: the first ``n`` of the dump's
    test.jsonl questions (synthetic), else ``n`` seeded facts of the dump itself, asked of both
    stores (bench/refresh_paired_h1.py) — so two builds that merged relations differently are
    still compared on the same questions."""
    questions = dump / "test.jsonl"
    if questions.is_file():
        from lokg.evaluation.cli import run_eval

        found = {}
        for name, store in stores.items():
            out = work / f"eval-{store.name}"
            shutil.rmtree(out, ignore_errors=True)
            summary = run_eval(dataset=f"synth:{questions}", split=None, store=str(store),
                               llm="none", out=str(out), limit=n, progress=False,
                               log=lambda _: None)
            found[name] = {"questions": f"{questions.name}, first {n}",
                           "H@1": summary["lokg"]["H@1"]}
        return found
    from bench.common import dump_facts, hits

    facts = dump_facts(dump)
    asked = random.Random(seed).sample(sorted(facts), min(n, len(facts)))
    return {name: {"questions": f"{len(asked)} facts of the dump, the same for both",
                   "H@1": round(sum(hits(str(store), facts, asked)) / len(asked), 3)}
            for name, store in stores.items()}


def equality(work: Path, edited: Path, n_eval: int, seed: int) -> dict:
    """The refreshed store against the full one (module docstring), and whether it passes."""
    from lokg.pipeline.refresh import DETERMINISTIC_TABLES
    from lokg.runtime.contract import Store

    store = Store(work / "store")
    refreshed, full = store.build(), Store(work / "full-store").build()
    previous = store.build(store.build_ids()[0])  # the original build the refresh started from
    groups = [merge_groups(b.read("relation_map")) for b in (refreshed, full, previous)]
    same_merges = groups[0] == groups[1]
    tables = {t: table_equality(*(deterministic_part(b.read(t), t) for b in (refreshed, full)))
              for t in DETERMINISTIC_TABLES if same_merges or t not in AFTER_MERGES}
    h1 = h1_reader_none({"refresh": work / "store", "full": work / "full-store"}, edited,
                        n_eval, seed, work)
    learned = {"merge_groups": [len(g) for g in groups[:2]],
               "merge_groups_differing": len(groups[0] ^ groups[1]),
               "merge_groups_differing_from_previous": len(groups[0] ^ groups[2]),
               "scos_refresh": refreshed.manifest["report"]["stages"]["scos_merge"].get("refresh"),
               "compared_after_merges": same_merges,
               "H@1": h1, "edges": attention_difference(refreshed.read("edges"),
                                                         full.read("edges"))}
    passed = (all(t["equal"] for t in tables.values())
              and abs(h1["refresh"]["H@1"] - h1["full"]["H@1"]) <= TOLERANCE["H@1"])
    return {"tables": tables, "learned": learned, "tolerance": TOLERANCE, "passed": passed,
            "builds": [refreshed.build_id, full.build_id],
            "refresh": refreshed.manifest["report"]["refresh"],
            "ingest_steps": {name: _ingest_steps(b) for name, b in (("refresh", refreshed),
                                                                     ("full", full))}}


def _ingest_steps(build) -> dict[str, float]:
    """Wall seconds of each step of the build's ingest (its report's ``step_seconds``)."""
    return build.manifest["report"]["stages"].get("ingest", {}).get("step_seconds", {})


def markdown(result: dict) -> str:
    """The per-stage table, the whole build and the equality check."""
    lines = ["| stage | refresh made it | full wall s | refresh wall s | refresh / full (wall) "
             "| full CPU s | refresh CPU s | refresh / full (CPU) |",
             "|---|---|--:|--:|--:|--:|--:|--:|"]
    for r in result["stages"]:
        lines.append(f"| {r['stage']} | {r['how']} | {r['full_wall_s']:.1f} | "
                     f"{r['refresh_wall_s']:.1f} | {_pct(r['wall_ratio'])} | "
                     f"{r['full_cpu_s']:.1f} | {r['refresh_cpu_s']:.1f} | {_pct(r['cpu_ratio'])} |")
    w = result["whole"]
    lines.append(f"| **whole build** | | **{w['full_wall_s']:.1f}** | **{w['refresh_wall_s']:.1f}**"
                 f" | **{_pct(w['wall_ratio'])}** | **{w['full_cpu_s']:.1f}** | "
                 f"**{w['refresh_cpu_s']:.1f}** | **{_pct(w['cpu_ratio'])}** |")
    eq = result["equality"]
    lines += ["", f"Target ≤ {100 * TARGET_RATIO:.0f} % of the full build: "
              f"{'met' if w['meets_target'] else 'not met'}. Equality: "
              f"{'passed' if eq['passed'] else 'FAILED'}.", "",
              "| table | rows refresh / full | only in refresh | only in full | equal |",
              "|---|--:|--:|--:|---|"]
    for name, t in eq["tables"].items():
        lines.append(f"| {name} | {t['rows'][0]:,} / {t['rows'][1]:,} | {t['only_refresh']} | "
                     f"{t['only_full']} | {'yes' if t['equal'] else '**no**'} |")
    lines += ingest_step_lines(eq.get("ingest_steps", {}))
    learned, h1 = eq["learned"], eq["learned"]["H@1"]
    scos = learned.get("scos_refresh") or {}
    lines += ["", f"Learned: SCOS merge groups {learned['merge_groups'][0]} / "
              f"{learned['merge_groups'][1]}, {learned['merge_groups_differing']} differing "
              f"from the full build's, {learned['merge_groups_differing_from_previous']} from the "
              f"previous build's (refresh's cosine vectors: {scos.get('vectors', 'its own')}, "
              f"shift {scos.get('vector_shift')}); tables after the merges "
              + ("compared above" if learned["compared_after_merges"] else
                 f"not compared ({', '.join(AFTER_MERGES)}: the merges differ)") + "; "
              f"H@1 (reader none, {h1['full']['questions']}) {h1['refresh']['H@1']:.3f} / "
              f"{h1['full']['H@1']:.3f}; GAT edges shared {learned['edges']['shared']:,}, "
              f"max attention difference {learned['edges']['max_attention_diff']:.2e}."]
    return "\n".join(lines) + "\n"


def ingest_step_lines(steps: dict[str, dict[str, float]]) -> list[str]:
    """Ingest's steps, full and refresh wall seconds ([] when the reports hold none)."""
    full, refresh = steps.get("full", {}), steps.get("refresh", {})
    if not full and not refresh:
        return []
    lines = ["", "| ingest step | full wall s | refresh wall s |", "|---|--:|--:|"]
    for step in [*full, *(s for s in refresh if s not in full)]:
        lines.append(f"| {step} | {full.get(step, 0.0):.1f} | {refresh.get(step, 0.0):.1f} |")
    return lines


def _pct(ratio: float | None) -> str:
    return "—" if ratio is None else f"{100 * ratio:.1f} %"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    source = ap.add_mutually_exclusive_group(required=True)
    source.add_argument("--triples", type=float, help="a synthetic dump of this many triples")
    source.add_argument("--dump", type=Path, help="this dump (FB15k-237) instead")
    ap.add_argument("--work", type=Path, required=True)
    ap.add_argument("--fraction", type=float, default=0.01, help="share of triples changed")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--questions", type=int, default=1000, help="synthetic: labelled questions")
    ap.add_argument("--eval", type=int, default=200, help="questions for H@1 (reader none)")
    ap.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--markdown", type=Path)
    ap.add_argument("--resume", action="store_true",
                    help="keep the builds W/builds.json records (and their stores)")
    args = ap.parse_args(argv)
    args.work.mkdir(parents=True, exist_ok=True)
    original = (args.dump.resolve() if args.dump
                else dump_for(args.work, int(args.triples), args.seed, args.questions))
    edited, edit = edited_dump(original, args.work, args.fraction, args.seed)
    started = {"commit": _commit(), "utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()),
               "uptime": _uptime()}
    print(f"edit: {edit}; {started}", flush=True)
    builds = run_builds(original, edited, args.work, args.overrides, args.resume)
    eq = equality(args.work, edited, args.eval, args.seed)
    stages = stage_comparison(builds["full"], builds["refresh"], eq["refresh"]["stages"])
    result = {"dump": str(original), "edit": edit, "overrides": args.overrides,
              "started": started, "uptime_after": _uptime(), "builds": builds,
              "stages": stages, "whole": whole_build(stages), "equality": eq}
    table = markdown(result)
    print(table)
    if args.json:
        args.json.write_text(json.dumps(result, indent=2, default=sorted))
    if args.markdown:
        args.markdown.write_text(table)


def _uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def _commit() -> str:
    return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True,
                          text=True).stdout.strip()


if __name__ == "__main__":
    main()
