"""The build side of the ``lokg`` command: ``synth``, ``build``, ``publish``, ``demo``,
``config`` (:data:`BUILD_COMMANDS`), which ``lokg.cli`` adds to the runtime's commands.

Heavy modules (pyspark, torch) load only inside the commands needing them.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import click

from lokg.pipeline.synth import (ENTITY_NAMES, MAX_INVERSE_TRIPLES, NAMINGS, OPTION_DEFAULTS, generate,
                            labelled_overrides, linked_text_overrides)
from lokg.pipeline.synth_wording import STYLES, WORDINGS
from lokg.runtime.cli import STORE_OPTION, disk_refusal, render_answer, render_summary
from lokg.pipeline.config import load_config
from lokg.common.dumps import FORMATS
from lokg.runtime.contract import Store
from lokg.runtime.errors import LokgError


@click.command()
@click.option("--triples", "n_triples", type=click.IntRange(min=100), default=100_000,
              show_default=True, help="Number of graph triples (entity→entity edges).")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False))
@click.option("--malformed-rate", type=click.FloatRange(0.0, 0.5), default=0.0, show_default=True,
              help="Share of malformed lines mixed into the N-Triples file.")
@click.option("--gzip", "gzip_", is_flag=True, help="Write kg.nt.gz instead of kg.nt.")
@click.option("--questions", "n_questions", type=click.IntRange(min=0), default=1000,
              show_default=True, help="Number of questions.")
@click.option("--naming", type=click.Choice(NAMINGS), default=OPTION_DEFAULTS["naming"],
              show_default=True, help="Relation names: film.film.directed_by, /film/film/directed_by, "
                   "__film__film__directed_by, filmFilmDirectedBy or directed_by.")
@click.option("--entity-names", type=click.Choice(ENTITY_NAMES),
              default=OPTION_DEFAULTS["entity_names"],
              show_default=True, help="English names as made, with _ for spaces, or with a "
                                      "'(qualifier)' on some entities.")
@click.option("--question-style", type=click.Choice(STYLES),
              default=OPTION_DEFAULTS["question_style"],
              show_default=True, help="pathquestion: forward 2-/3-hop chains; metaqa: movie "
                                      "questions whose hops may walk relations backwards "
                                      "(adds the movie families; at most "
                                      f"{MAX_INVERSE_TRIPLES:,} triples).")
@click.option("--hops", type=click.IntRange(1, 3), multiple=True,
              help="Hop counts to ask (repeatable; default: the style's, 2 3 or 1 2 3).")
@click.option("--test-wording", type=click.Choice(WORDINGS),
              default=OPTION_DEFAULTS["test_wording"], show_default=True,
              help="Wording of the test split (train/dev always use the train wording).")
@click.option("--max-answers", type=click.IntRange(min=1),
              default=OPTION_DEFAULTS["max_answers"], show_default=True,
              help="Most answers a question may have.")
@click.option("--withhold", type=click.IntRange(min=0), default=OPTION_DEFAULTS["withhold"],
              show_default=True,
              help="Edges left out of the dump and stated in linked documents instead "
                   "(linked_documents.jsonl, openie_linked.json, withheld.json).")
@click.option("--articles", type=click.FloatRange(0.0, 1.0), default=OPTION_DEFAULTS["articles"],
              show_default=True,
              help="Share of the entities with a linked article stating their facts "
                   "(articles.jsonl, for documents.corpus: restored sentences and citations).")
def synth(n_triples: int, seed: int, out_dir: str, malformed_rate: float, gzip_: bool,
          n_questions: int, naming: str, entity_names: str, question_style: str,
          hops: tuple[int, ...], test_wording: str, max_answers: int, withhold: int,
          articles: float) -> None:
    """Generate a deterministic synthetic Freebase-like KG."""
    try:
        manifest = generate(out_dir, n_triples=n_triples, seed=seed,
                            malformed_rate=malformed_rate, gzip=gzip_, n_questions=n_questions,
                            naming=naming, entity_names=entity_names,
                            question_style=question_style, hops=hops or None,
                            test_wording=test_wording, max_answers=max_answers,
                            withhold=withhold, articles=articles)
    except LokgError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(json.dumps(manifest["counts"], indent=2))


# ---------------------------------------------------------------------------------------------
@click.command()
@click.option("--dump", required=True, type=click.Path(exists=True), help="Raw dump file or dir.")
@click.option("--format", "fmt", default="auto", show_default=True,
              type=click.Choice(FORMATS))
@STORE_OPTION
@click.option("--until", help="Stop after this stage (no publish).")
@click.option("--stage", help="Run only this stage of the build given by --build-id (no publish).")
@click.option("--build-id", help="Build id (default: a new one).")
@click.option("--full", is_flag=True,
              help="Rebuild every stage (refresh.mode=full) instead of refreshing from the "
                   "store's previous build.")
@click.option("--config", "config_file", type=click.Path(exists=True, dir_okay=False))
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE",
              help="Config override, e.g. ingest.max_malformed_share=0.02 (repeatable).")
def build(dump: str, fmt: str, store_root: str, until: str | None, stage: str | None,
          build_id: str | None, full: bool, config_file: str | None,
          overrides: tuple[str, ...]) -> None:
    """Build a store from a dump through every pipeline stage, then publish it atomically.

    When the store holds a previous build, this is a refresh: stages whose inputs, config and
    code are unchanged reuse that build's outputs, and partial stages recompute only what
    changed (docs/OPERATIONS.md, "Refresh"); --full rebuilds everything.

    With --stage, run that one stage of build --build-id (idempotent: it replaces only its own
    staging directory); `lokg publish` then publishes the staged build. This is how the
    Airflow DAG drives a build task by task.
    """
    from lokg.pipeline import driver as pipeline

    config = _load_config(config_file, (f"ingest.format={fmt}", *overrides,
                                        *(["refresh.mode=full"] if full else [])))
    try:
        if stage is not None:
            if build_id is None:
                raise click.UsageError("--stage needs --build-id (the build the stage belongs to)")
            record = pipeline.run_stage(Store(store_root), build_id, stage, config, dump)
            click.echo(json.dumps({"stage": stage, "build_id": build_id,
                                   "seconds": record["seconds"]}))
            return
        published = pipeline.build(dump, store_root, config, until=until, build_id=build_id,
                                   log=click.echo)
    except LokgError as exc:
        raise click.ClickException(str(exc)) from None
    except OSError as exc:  # a full disk, a read-only store
        raise disk_refusal(exc, f"build failed: store {store_root}") from None
    if published is not None:
        click.echo(render_summary(published))


@click.command()
@STORE_OPTION
@click.option("--build-id", required=True, help="The staged build to publish.")
@click.option("--dump", type=click.Path(exists=True), help="The dump, to record its checksums.")
@click.option("--config", "config_file", type=click.Path(exists=True, dir_okay=False))
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE")
def publish(store_root: str, build_id: str, dump: str | None, config_file: str | None,
            overrides: tuple[str, ...]) -> None:
    """Validate a build staged stage by stage (`lokg build --stage`) and publish it atomically."""
    from lokg.pipeline import driver as pipeline

    config = _load_config(config_file, overrides)
    try:
        published = pipeline.publish_build(
            Store(store_root), build_id, config,
            sources=pipeline.source_fingerprints(dump) if dump else None)
    except LokgError as exc:
        raise click.ClickException(str(exc)) from None
    except OSError as exc:  # a full disk, a read-only store
        raise disk_refusal(exc, f"publish failed: store {store_root}") from None
    click.echo(render_summary(published))


def _load_config(config_file, overrides) -> dict:
    """The validated config, or a one-line error (exit 1) before any stage starts."""
    try:
        return load_config(config_file, overrides)
    except LokgError as exc:
        raise click.ClickException(str(exc)) from None


@click.command("config")
@click.option("--config", "config_file", type=click.Path(exists=True, dir_okay=False))
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE")
def config_command(config_file: str | None, overrides: tuple[str, ...]) -> None:
    """Validate a build config and print it resolved (defaults, file, overrides) as JSON.

    The DAG's plan task runs it, so a bad value fails the run once instead of in every retry
    of the first stage."""
    click.echo(json.dumps(_load_config(config_file, overrides), indent=2))


@click.command()
@click.option("--workdir", type=click.Path(file_okay=False),
              help="Where to put the synthetic dump and the store (default: a temp dir).")
@click.option("--triples", "n_triples", type=click.IntRange(min=100), default=20_000,
              show_default=True)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--llm", "llm_name", default="local", show_default=True,
              help="Reader for the demo question (local = the embedded SmolLM2).")
def demo(workdir: str | None, n_triples: int, seed: int, llm_name: str) -> None:
    """The embedded default end to end: synthetic KG → build → publish → one question answered."""
    from lokg.pipeline import driver as pipeline
    from lokg.runtime.query import Runtime

    root = Path(workdir or tempfile.mkdtemp(prefix="lokg-demo-"))
    dump = root / "dump"
    click.echo(f"[1/4] generating a synthetic KG with {n_triples:,} triples in {dump}")
    generate(dump, n_triples=n_triples, seed=seed, malformed_rate=0.001, gzip=True,
             articles=1.0)
    click.echo("[2/4] building the store (Spark local), learning from the dump's train/dev "
               "questions, restoring each triple's sentence from the entities' articles")
    config = load_config(None, ["ingest.format=synth", *labelled_overrides(dump),
                                *linked_text_overrides(dump)])
    try:
        published = pipeline.build(str(dump), str(root / "store"), config, log=click.echo)
    except LokgError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo("[3/4] verifying the published store")
    Store(root / "store").build(verify=True)
    click.echo(render_summary(published))
    first = json.loads((dump / "test.jsonl").read_text(encoding="utf-8").splitlines()[0])
    click.echo(f"[4/4] asking the store, reader '{llm_name}': {first['question']}")
    answer = Runtime.open(root / "store").ask(first["question"], llm=llm_name)
    click.echo(render_answer(answer))
    click.echo(f"  gold answer: {'; '.join(first['answers'])}")


#: What ``lokg.cli`` adds to the ``lokg`` group.
BUILD_COMMANDS = (synth, build, publish, demo, config_command)
