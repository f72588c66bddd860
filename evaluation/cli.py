"""``lokg eval``: run methods over a dataset split against a store and write the reports.

Registered on the ``lokg`` group by lokg/cli.py. Heavy pieces (the runtime, Spark for
``--build``, matplotlib) are imported inside :func:`run_eval` only.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Sequence
from pathlib import Path

import click

from lokg.common.datasets import DatasetError, load_dataset
from lokg.evaluation.context import ENTITY_MODES, MethodError, entity_modes
from lokg.evaluation.methods import METHODS, method_names, run_names
from lokg.evaluation.report import breakdown_table, markdown_table
from lokg.evaluation.runner import EvalError
from lokg.runtime.config import DEFAULT_BUDGET, MAX_BUDGET, POLICIES, ConfigError
from lokg.runtime.llm import available_backends
from lokg.runtime.query_settings import READER_MODES

PLOT_FILE = "accuracy_vs_tokens.png"
LOSS_PLOT_FILE = "loss_by_step.png"
MARKDOWN_FILE = "summary.md"


def command_line(**options) -> str:
    """The ``lokg eval`` command that reproduces a run, options in a fixed order."""
    parts = ["lokg", "eval"]
    for name in ("dataset", "split", "store", "store_no_scos", "methods", "llm", "reader",
                 "policy", "budget", "entities", "out", "limit", "kb"):
        value = options.get(name)
        if value is not None:
            parts += [f"--{name.replace('_', '-')}", str(value)]
    for item in options.get("overrides") or ():
        parts += ["--set", item]
    if options.get("build"):
        parts.append("--build")
    return shlex.join(parts)


def ensure_store(store_root: str, dataset, *, build: bool, kb: str | None, overrides: Sequence[str],
                 scos: bool, log: Callable[[str], None]) -> None:
    """Build the store from the dataset's KB when it has no published build and ``build`` is set.

    PathQuestion's ``train.txt`` feeds GAT's gold-path term (``gat.questions``) and the relation
    knowledge (``relation_knowledge.questions``), ``dev.txt`` picks the relation knowledge's
    thresholds (``relation_knowledge.dev_questions``); the split being evaluated is never given
    to a build.
    """
    from lokg.runtime.contract import Store

    if Store(store_root).current_id() is not None:
        return
    dump = kb or (str(dataset.kb) if dataset.kb else None)
    if not build:
        raise EvalError(f"{store_root}: no published build; build it with `lokg build` or pass "
                        "--build" + (f" (from {dump})" if dump else " --kb DUMP"))
    if dump is None:
        raise EvalError(f"--build: dataset {dataset.kind} has no KB; pass --kb DUMP")
    from lokg.pipeline import driver as pipeline
    from lokg.pipeline.config import load_config

    settings = [f"ingest.format={dataset.kb_format or 'auto'}" if not kb else "ingest.format=auto"]
    if dataset.train_file is not None and dataset.train_file != dataset.source:
        settings += [f"gat.questions={dataset.train_file}",
                     f"relation_knowledge.questions={dataset.train_file}"]
    if dataset.dev_file is not None and dataset.dev_file != dataset.source:
        settings.append(f"relation_knowledge.dev_questions={dataset.dev_file}")
    if not scos:
        settings.append("scos_merge.enabled=false")
    log(f"building {store_root} from {dump} ({', '.join(settings)})")
    pipeline.build(dump, store_root, load_config(None, [*settings, *overrides]), log=log)


def _open_stores(store: str, store_no_scos: str | None, names: Sequence[str], data, *,
                 build: bool, kb: str | None, overrides: Sequence[str], reader: str | None,
                 log: Callable[[str], None]):
    """The store's runtime (built first when asked) and, for methods that compare against one,
    the no-SCOS store's (``<store>-no-scos`` with ``--build``)."""
    from lokg.runtime.query import Runtime

    ensure_store(store, data, build=build, kb=kb, overrides=overrides, scos=True, log=log)
    query_settings = {"reader": reader} if reader else {}
    rt = Runtime.open(store, **query_settings)
    if not any(METHODS[n].needs_no_scos_store for n in names):
        return rt, None
    if store_no_scos is None and build:
        store_no_scos = f"{store.rstrip('/')}-no-scos"
    if store_no_scos is None:
        raise MethodError("lokg-no-scos needs --store-no-scos DIR (a store built with "
                          "scos_merge.enabled=false), or --build to build one")
    ensure_store(store_no_scos, data, build=build, kb=kb, overrides=overrides, scos=False,
                 log=log)
    return rt, Runtime.open(store_no_scos, **query_settings)


def _write_reports(out_dir: Path, summary: dict, run: dict, data, reading: str,
                   policy: str) -> None:
    """summary.json, summary.md and the two plots."""
    from lokg.evaluation.report import plot_accuracy_vs_tokens, plot_loss_by_step, render_markdown
    from lokg.evaluation.runner import write_summary

    write_summary(out_dir, summary)
    (out_dir / MARKDOWN_FILE).write_text(render_markdown(summary, run))
    title = f"{data.kind} {data.source.parent.name}/{data.source.name}, {reading}"
    plot_accuracy_vs_tokens(summary, out_dir / PLOT_FILE, title)
    plot_loss_by_step(summary, out_dir / LOSS_PLOT_FILE, f"{title}, policy {policy}")


def _limit_torch_threads(threads: int | None) -> None:
    """Cap torch's CPU threads (the question encoder) when asked."""
    if threads:
        import torch

        torch.set_num_threads(int(threads))


def _run_settings(data, ctx, *, llm: str, policy: str, budget: int,
                  modes: Sequence[str], reader: str | None) -> dict:
    """The settings a run file records (a rerun with other settings is refused)."""
    stores = {"store": ctx.runtime.build_id}
    if ctx.runtime_no_scos is not None:
        stores["store_no_scos"] = ctx.runtime_no_scos.build_id
    return {"dataset": data.describe(), "llm": llm, "policy": policy,
            "model": None if ctx.llm.model is None else str(ctx.llm.model),
            "budget": budget, "entities": ",".join(modes), "stores": stores,
            **({"reader": reader} if reader else {})}


def run_eval(*, dataset: str, split: str | None, store: str, methods: str = "lokg",
             llm: str = "none", policy: str = "lokg", budget: int = DEFAULT_BUDGET,
             entities: str = "gold", out: str, store_no_scos: str | None = None,
             build: bool = False, kb: str | None = None, overrides: Sequence[str] = (),
             limit: int | None = None, progress: bool = True, threads: int | None = 1,
             reader: str | None = None, log: Callable[[str], None] = print) -> dict:
    """Everything ``lokg eval`` does; returns the summary written to ``summary.json``.

    ``reader`` (choice | free) overrides the store's ``query.reader`` setting. ``entities``:
    one mode or several comma-separated (``gold,link``: rows ``<method>@<mode>``,
    evaluation.methods.run_names).

    ``threads`` caps torch's CPU threads (the question encoder): on a shared host torch's
    default (every core) embeds a question many times slower than one thread.
    """
    from lokg.evaluation.context import CountingLLM, EvalContext
    from lokg.evaluation.methods import make_methods
    from lokg.evaluation.runner import check_run_file, evaluate, merge_summary
    from lokg.runtime.llm import make_llm

    command = command_line(dataset=dataset, split=split, store=store, store_no_scos=store_no_scos,
                           methods=methods, llm=llm, policy=None if policy == "lokg" else policy,
                           budget=budget, entities=entities, out=out, limit=limit, kb=kb,
                           overrides=overrides, build=build, reader=reader)
    data = load_dataset(dataset, split)
    modes = entity_modes(entities)
    _limit_torch_threads(threads)
    names = method_names(methods)
    questions = data.questions[:limit] if limit else data.questions
    rt, rt_no_scos = _open_stores(store, store_no_scos, names, data, build=build, kb=kb,
                                  overrides=overrides, reader=reader, log=log)
    ctx = EvalContext(rt, CountingLLM(make_llm(llm)), budget, modes[0], rt_no_scos, policy)
    out_dir = Path(out)
    settings = _run_settings(data, ctx, llm=llm, policy=policy, budget=budget, modes=modes,
                             reader=reader)
    run = check_run_file(out_dir, settings, command)
    summary = evaluate(make_methods(names, ctx, modes), questions, out_dir, progress=progress)
    summary = merge_summary(out_dir, summary, list(run_names(list(METHODS), modes)))
    _write_reports(out_dir, summary, run, data, f"reader {llm}, B={budget}", policy)
    return summary


@click.command("eval")
@click.option("--dataset", required=True, metavar="KIND:PATH",
              help="pathquestion:DIR | metaqa:DIR | synth:FILE | jsonl:FILE")
@click.option("--split", help="Split to evaluate (PathQuestion, MetaQA: train|dev|test, default "
                              "test; MetaQA also <n>-hop/<split>, e.g. 2-hop/test; JSONL: "
                              "records whose 'split' field matches).")
@click.option("--store", "store", envvar="LOKG_STORE", required=True,
              type=click.Path(file_okay=False), help="Store root (env LOKG_STORE).")
@click.option("--store-no-scos", type=click.Path(file_okay=False),
              help="Store built with scos_merge.enabled=false, for lokg-no-scos.")
@click.option("--methods", default="lokg", show_default=True,
              help=f"Comma-separated, or 'all': {', '.join(METHODS)}.")
@click.option("--llm", type=click.Choice(available_backends()), default="none", show_default=True,
              help="Reader for every method (openai: LOKG_LLM_BASE_URL, LOKG_LLM_MODEL).")
@click.option("--reader", type=click.Choice(READER_MODES),
              help="How the one call answers: choice (one of the top candidates) | free (any "
                   "answer list). Default: the store's query.reader (choice).")
@click.option("--policy", type=click.Choice(POLICIES), default="lokg", show_default=True,
              help="Policy of the lokg methods: lokg (one call), precision (derived answer or "
                   "abstain, no call), route (derived where the precision gate passes, else one "
                   "call). Baselines ignore it.")
@click.option("--budget", type=click.IntRange(1, MAX_BUDGET), default=DEFAULT_BUDGET,
              show_default=True,
              help="Knowledge budget B in cl100k_base tokens.")
@click.option("--entities", default="gold", show_default=True, metavar="|".join(ENTITY_MODES),
              help="gold: the dataset's topic entities; link: link them from the question; "
                   "gold,link: both, rows <method>@gold and <method>@link.")
@click.option("--out", required=True, type=click.Path(file_okay=False),
              help="Run directory (an interrupted run resumes there).")
@click.option("--build", is_flag=True, help="Build missing stores from the dataset's KB.")
@click.option("--kb", type=click.Path(exists=True), help="Dump to --build from (default: the "
                                                         "dataset's KB).")
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE",
              help="Build config override for --build (repeatable).")
@click.option("--limit", type=click.IntRange(min=1), help="Only the first N questions.")
@click.option("--progress/--no-progress", default=True, show_default=True,
              help="Progress bars on stderr.")
@click.option("--threads", type=click.IntRange(min=0), default=1, show_default=True,
              help="torch CPU threads for the question encoder (0: torch's default).")
def eval_command(**options) -> None:
    """Evaluate methods on a dataset split: JSONL per question, summary.json/.md and plots."""
    from lokg.common.stage import BuildError
    from lokg.runtime.contract import StoreError
    from lokg.runtime.llm import LLMError
    from lokg.runtime.query import QueryError

    try:
        summary = run_eval(**options, log=lambda m: click.echo(m, err=True))
    except (DatasetError, MethodError, EvalError, StoreError, LLMError, BuildError,
            QueryError, ConfigError) as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(markdown_table(summary), nl=False)
    table = breakdown_table(summary)
    if table:
        click.echo("\nWhere answers were lost, questions (H@1 = 0):\n" + table, nl=False)
    click.echo(f"reports in {options['out']}")
