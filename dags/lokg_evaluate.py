"""``lokg_evaluate``: after every publish, a smoke evaluation of the new build behind a floor.

Scheduled on the Asset ``lokg://store/<name>`` that ``lokg_build``'s ``publish`` emits; the
event's extra names the store, the build, the dump it came from and the build it replaced.

* ``target``   — which build to judge: the triggering event's, or (manual run) the params';
* ``evaluate`` — runs the evaluation command (``lokg eval`` on the dump's smoke questions by
  default; the command is a param) into ``<reports>/eval/<build_id>/``;
* ``gate``     — compares the method's metrics with the floor. Below it, the task rolls the
  store back to the previous build with ``lokg store rollback`` (only while CURRENT still names
  the judged build) and fails without retrying, so the bad build is loud and unpublished.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pendulum
from airflow.sdk import Asset, Param, dag, task
from airflow.sdk.exceptions import AirflowFailException

import lokg_common as lc

STORE_ASSET = Asset(lc.STORE_ASSET_URI)

DEFAULT_COMMAND = ("{lokg} eval --dataset synth:{dump} --store {store} --methods {method} "
                   "--budget {budget} --limit {limit} --llm none --no-progress --out {out}")


@task
def target(*, params=None, triggering_asset_events=None) -> dict:
    """The build to judge, from the newest triggering Asset event or from the params."""
    events = [e for evs in (triggering_asset_events or {}).values() for e in evs]
    if events:  # several publishes may have queued one run: judge the newest
        extra = dict(max(events, key=lambda e: e.timestamp).extra)
    else:
        store = str(Path(lc.ROOT, params["store"]).resolve())
        extra = {"store": store, "build_id": params["build_id"] or lc.current_build(store),
                 "dump": params["dump"], "previous_build_id": params["previous_build_id"] or None,
                 "validation_budget": params["budget"]}
    if not extra.get("build_id"):
        raise AirflowFailException(f"store {extra['store']}: no published build to evaluate")
    print(f"judging build {extra['build_id']} of {extra['store']}")
    return extra


@task
def evaluate(judged: dict, *, params=None) -> str:
    """Run the evaluation command; returns the path of its ``summary.json``."""
    out = Path(lc.REPORTS, "eval", judged["build_id"])
    out.mkdir(parents=True, exist_ok=True)
    fields = {"lokg": lc.LOKG, "store": judged["store"], "build_id": judged["build_id"],
              "dump": judged["dump"], "budget": judged["validation_budget"],
              "method": params["method"], "limit": params["limit"], "out": str(out)}
    try:
        command = params["command"].format(**fields)
    except (KeyError, IndexError) as exc:
        raise AirflowFailException(f"param command: unknown placeholder {exc} "
                                   f"(known: {', '.join(fields)})") from None
    lc.run_logged(shlex.split(command))
    summary = out / "summary.json"
    if not summary.is_file():
        raise RuntimeError(f"{command}: wrote no {summary}")
    return str(summary)


@task
def gate(judged: dict, summary_path: str, *, params=None) -> dict:
    """Fail loudly below the floor, after putting the previous build back if CURRENT is ours."""
    summary = json.loads(Path(summary_path).read_text(encoding="utf-8"))
    method = params["method"]
    if method not in summary:
        raise AirflowFailException(f"{summary_path}: no method {method!r} "
                                   f"(methods: {', '.join(summary) or 'none'})")
    scores = summary[method]
    missing = [m for m in params["floor"] if scores.get(m) is None]
    if missing:
        raise AirflowFailException(f"{summary_path}: {method} has no value for {missing}")
    below = {m: (scores[m], floor) for m, floor in params["floor"].items() if scores[m] < floor}
    print(f"{method} on build {judged['build_id']}: "
          + ", ".join(f"{m}={scores[m]:.4g} (floor {f})" for m, f in params["floor"].items()))
    if not below:
        return {m: scores[m] for m in params["floor"]}
    verdict = ", ".join(f"{m}={v:.4g} < {f}" for m, (v, f) in below.items())
    store, build_id, previous = judged["store"], judged["build_id"], judged["previous_build_id"]
    if lc.current_build(store) != build_id:
        action = f"CURRENT no longer names it ({lc.current_build(store)}); nothing rolled back"
    elif previous:
        lc.run_logged([lc.LOKG, "store", "rollback", previous, "--store", store])
        action = f"store rolled back to {previous}"
    else:
        action = "no previous build to roll back to: it STAYS CURRENT, fix and rebuild"
    raise AirflowFailException(f"build {build_id} is below the quality floor ({verdict}); {action}")


@dag(
    dag_id="lokg_evaluate",
    schedule=[STORE_ASSET],
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    default_args=lc.DEFAULT_ARGS,
    tags=["lokg", "evaluation", "quality-gate"],
    doc_md=__doc__,
    params={
        "command": Param(lc.EVAL_COMMAND or DEFAULT_COMMAND, type="string",
                         description="Evaluation command; placeholders {lokg} {store} {build_id} "
                                     "{dump} {budget} {method} {limit} {out}; writes "
                                     "{out}/summary.json keyed by method."),
        "method": Param("lokg", type="string", description="Method whose scores are gated."),
        "floor": Param(lc.EVAL_FLOOR, type="object",
                       description="Metric -> minimum, e.g. {\"H@1\": 0.3}."),
        "limit": Param(50, type="integer", minimum=1, description="Smoke questions."),
        # manual runs only (an Asset-triggered run takes these from the event):
        "store": Param(lc.STORE, type="string"),
        "build_id": Param("", type="string", description="Default: the store's CURRENT."),
        "previous_build_id": Param("", type="string", description="Rollback target."),
        "dump": Param(lc.DUMP, type="string", description="Dump holding questions.jsonl."),
        "budget": Param(lc.DEFAULT_BUDGET, type="integer", minimum=1),
    },
)
def lokg_evaluate():
    judged = target()
    gate(judged, evaluate(judged))


lokg_evaluate()
