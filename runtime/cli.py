"""The ``lokg`` command line. Heavy modules (pyspark) load only inside the commands needing them."""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import click

from runtime.config import ENCODINGS, POLICIES, RETRIEVALS, ConfigError, load_config
from runtime.contract import Build, Store, StoreError

STORE_OPTION = click.option(
    "--store", "store_root", envvar="LOKG_STORE", default="lokg_store", show_default=True,
    type=click.Path(file_okay=False), help="Store root (env LOKG_STORE).",
)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="lokg")
def cli() -> None:
    """LOKG: one-call, token-budgeted question answering over knowledge graphs."""


# ---------------------------------------------------------------------------------------------
@cli.command()
@click.option("--triples", "n_triples", type=click.IntRange(min=100), default=100_000,
              show_default=True, help="Number of graph triples (entity→entity edges).")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False))
@click.option("--malformed-rate", type=click.FloatRange(0.0, 0.5), default=0.0, show_default=True,
              help="Share of malformed lines mixed into the N-Triples file.")
@click.option("--gzip", "gzip_", is_flag=True, help="Write kg.nt.gz instead of kg.nt.")
@click.option("--questions", "n_questions", type=click.IntRange(min=0), default=1000,
              show_default=True, help="Number of 2- and 3-hop questions.")
def synth(n_triples: int, seed: int, out_dir: str, malformed_rate: float, gzip_: bool,
          n_questions: int) -> None:
    """Generate a deterministic synthetic Freebase-like KG (DESIGN §6)."""
    from runtime.synth import generate

    manifest = generate(out_dir, n_triples=n_triples, seed=seed, malformed_rate=malformed_rate,
                        gzip=gzip_, n_questions=n_questions)
    click.echo(json.dumps(manifest["counts"], indent=2))


# ---------------------------------------------------------------------------------------------
@cli.command()
@click.option("--dump", required=True, type=click.Path(exists=True), help="Raw dump file or dir.")
@click.option("--format", "fmt", default="auto", show_default=True,
              type=click.Choice(["auto", "nt", "tsv", "pathquestion", "fb15k237", "synth"]))
@STORE_OPTION
@click.option("--until", help="Stop after this stage (no publish).")
@click.option("--stage", help="Run only this stage of the build given by --build-id (no publish).")
@click.option("--build-id", help="Build id (default: a new one).")
@click.option("--config", "config_file", type=click.Path(exists=True, dir_okay=False))
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE",
              help="Config override, e.g. ingest.max_malformed_share=0.02 (repeatable).")
def build(dump: str, fmt: str, store_root: str, until: str | None, stage: str | None,
          build_id: str | None, config_file: str | None, overrides: tuple[str, ...]) -> None:
    """Build a store from a dump through every pipeline stage, then publish it atomically.

    With --stage, run that one stage of build --build-id (idempotent: it replaces only its own
    staging directory); `lokg publish` then publishes the staged build. This is how the
    Airflow DAG drives a build task by task.
    """
    from runtime import pipeline

    config = _load_config(config_file, (f"ingest.format={fmt}", *overrides))
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
    except (pipeline.BuildError, StoreError) as exc:
        raise click.ClickException(str(exc)) from None
    if published is not None:
        click.echo(render_summary(published))


@cli.command()
@STORE_OPTION
@click.option("--build-id", required=True, help="The staged build to publish.")
@click.option("--dump", type=click.Path(exists=True), help="The dump, to record its checksums.")
@click.option("--config", "config_file", type=click.Path(exists=True, dir_okay=False))
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE")
def publish(store_root: str, build_id: str, dump: str | None, config_file: str | None,
            overrides: tuple[str, ...]) -> None:
    """Validate a build staged stage by stage (`lokg build --stage`) and publish it atomically."""
    from runtime import pipeline

    config = _load_config(config_file, overrides)
    try:
        published = pipeline.publish_build(
            Store(store_root), build_id, config,
            sources=pipeline.source_fingerprints(dump) if dump else None)
    except (pipeline.BuildError, StoreError) as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(render_summary(published))


def _load_config(config_file, overrides) -> dict:
    try:
        return load_config(config_file, overrides)
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from None


# ---------------------------------------------------------------------------------------------
@cli.group()
def store() -> None:
    """Inspect, verify and roll back published builds; collect abandoned staging."""


@store.command("list")
@STORE_OPTION
def store_list(store_root: str) -> None:
    """List complete builds, newest last; '*' marks CURRENT."""
    st = Store(store_root)
    try:
        current = st.current_id()
    except StoreError as exc:
        raise click.ClickException(str(exc)) from None
    ids = st.build_ids()
    if not ids:
        raise click.ClickException(f"{st.root}: no builds")
    for build_id in ids:
        manifest = st.build(build_id).manifest
        rows = ", ".join(f"{t}={e['rows']}" for t, e in sorted(manifest["tables"].items()))
        mark = "*" if build_id == current else " "
        click.echo(f"{mark} {build_id}  {manifest['created_at']}  {rows}")


@store.command("verify")
@click.argument("build_id", required=False)
@STORE_OPTION
def store_verify(build_id: str | None, store_root: str) -> None:
    """Check schema version, schemas and every file's sha256 (default: the CURRENT build)."""
    try:
        built = Store(store_root).build(build_id, verify=True)
    except StoreError as exc:
        raise click.ClickException(f"verify failed: {exc}") from None
    click.echo(f"ok: build {built.build_id}, {len(built.manifest['files'])} files verified")


@store.command("rollback")
@click.argument("build_id")
@STORE_OPTION
def store_rollback(build_id: str, store_root: str) -> None:
    """Point CURRENT at an earlier complete build (verified first)."""
    try:
        built = Store(store_root).rollback(build_id)
    except StoreError as exc:
        raise click.ClickException(f"rollback refused: {exc}") from None
    click.echo(f"CURRENT -> {built.build_id}")


@store.command("gc")
@click.option("--older-than", "hours", type=click.FloatRange(min=0), default=48.0,
              show_default=True, help="Only staging directories unchanged for this many hours.")
@STORE_OPTION
def store_gc(hours: float, store_root: str) -> None:
    """Delete the staging directories of killed or abandoned builds.

    Publish removes its own build's staging; this collects what runs that never published
    left behind. Keep --older-than above the longest stage's run time (tasks time out
    after 12 h).
    """
    try:
        removed = Store(store_root).collect_staging(hours * 3600)
    except StoreError as exc:
        raise click.ClickException(str(exc)) from None
    for name in removed:
        click.echo(f"removed {Path(store_root) / 'staging' / name}")
    click.echo(f"{len(removed)} staging director{'y' if len(removed) == 1 else 'ies'} removed")


@store.command("show")
@click.argument("build_id", required=False)
@STORE_OPTION
def store_show(build_id: str | None, store_root: str) -> None:
    """Print the summary of a build (default: CURRENT)."""
    try:
        click.echo(render_summary(Store(store_root).build(build_id)))
    except StoreError as exc:
        raise click.ClickException(str(exc)) from None


#: The figures of each stage's report worth a line in a build summary.
SUMMARY_KEYS = {
    "ingest": ("format", "lines", "malformed", "entities", "relations", "triples"),
    "types": ("rule", "typed_entities", "distinct_types"),
    "transe_train": ("device", "epochs", "final_loss"),
    "relation_stats": ("candidate_pairs",),
    "scos_merge": ("R0", "R_star", "rho_hat", "L_info"),
}


def render_summary(built: Build) -> str:
    """Human-readable build summary: tables, then each stage's time and key figures."""
    manifest = built.manifest
    lines = [f"build {built.build_id}  ({manifest['created_at']})  at {built.path}"]
    for table, entry in sorted(manifest["tables"].items()):
        lines.append(f"  {table:<15} {entry['rows']:>12,} rows")
    stages = manifest.get("report", {}).get("stages", {})
    for stage, rep in sorted(stages.items(), key=lambda kv: list(SUMMARY_KEYS).index(kv[0])
                             if kv[0] in SUMMARY_KEYS else len(SUMMARY_KEYS)):
        figures = ", ".join(f"{k}={_fmt(rep[k])}" for k in SUMMARY_KEYS.get(stage, ()) if k in rep)
        lines.append(f"  stage {stage:<15} {rep['seconds']:>7.1f}s  {figures}")
    return "\n".join(lines)


def _fmt(value) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


# ---------------------------------------------------------------------------------------------
@cli.command("scos-report")
@click.argument("store_root", type=click.Path(file_okay=False))
@click.option("--build", "build_id", help="Build id (default: CURRENT).")
def scos_report(store_root: str, build_id: str | None) -> None:
    """Print the SCOS relation merges of a build (names, signals, θ, loss) and its summary."""
    try:
        built = Store(store_root).build(build_id)
    except StoreError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(render_scos_report(built))


def render_scos_report(built: Build) -> str:
    """The merge table and |R0| → |R*|, ρ̂, L_info of a build's scos_merge stage."""
    import pyarrow.parquet as pq

    report = built.manifest.get("report", {}).get("stages", {}).get("scos_merge")
    if report is None:
        raise click.ClickException(f"build {built.build_id} has no scos_merge stage report")
    lines = [f"SCOS for build {built.build_id}: |R0| = {report['R0']} -> |R*| = {report['R_star']}, "
             f"rho_hat = {report['rho_hat']:.4f}, L_info = {report['L_info']:.4f}",
             f"  L_info normaliser: {report['normaliser']['definition']} "
             f"= {report['normaliser']['value']:.4f}"]
    for warning in report.get("warnings", []):
        lines.append(f"  warning: {warning}")
    log_path = built.path / "reports" / "merge_log.parquet"
    rows = pq.read_table(log_path).to_pylist() if log_path.exists() else []
    if not rows:
        lines.append("  no merges")
        return "\n".join(lines)
    header = f"  {'#':>3}  {'sim':>5} {'nmi':>5} {'jacc':>5} {'cos':>5} {'theta':>5} {'loss':>6}  merge"
    lines.append(header)
    for row in rows:
        lines.append(f"  {row['step']:>3}  {row['sim']:5.3f} {row['nmi']:5.3f} {row['jaccard']:5.3f} "
                     f"{row['cos']:5.3f} {row['theta']:5.3f} {row['loss']:6.4f}  "
                     f"{row['left']}  +  {row['right']}")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
@cli.command()
@click.argument("question")
@STORE_OPTION
@click.option("--budget", type=int, default=2048, show_default=True,
              help="Knowledge budget B in cl100k_base tokens (the prompt adds a fixed overhead).")
@click.option("--llm", "llm_name", default="none", show_default=True,
              help="Reader: local (embedded SmolLM2), openai (LOKG_LLM_BASE_URL/MODEL/API_KEY) "
                   "or none (top retrieval answer, no call).")
@click.option("--entity", "entities", multiple=True,
              help="Entity id or key to ask about (repeatable); skips linking.")
@click.option("--retrieval", default="taimr", show_default=True,
              type=click.Choice(RETRIEVALS))
@click.option("--encoding", default="ittc", show_default=True, type=click.Choice(ENCODINGS))
@click.option("--policy", default="lokg", show_default=True,
              type=click.Choice(POLICIES),
              help="lokg: one call on the LOKG context; precision: the answer derived from the "
                   "graph where the precision gate passes, else abstain (no call); route: derived "
                   "where the routing gate passes, else one call (stage relation_knowledge).")
@click.option("--relation-weight", type=click.FloatRange(min=0), default=None,
              help="λ_rel of the query-relation term (default: the store's query.relation_weight).")
@click.option("--chain-boost/--no-chain-boost", default=None,
              help="ITTC boost of the predicted chain's facts (default: query.chain_boost).")
@click.option("--json", "as_json", is_flag=True, help="Print the whole Answer as JSON.")
def query(question: str, store_root: str, budget: int, llm_name: str, entities: tuple[str, ...],
          retrieval: str, encoding: str, policy: str, relation_weight: float | None,
          chain_boost: bool | None, as_json: bool) -> None:
    """Answer QUESTION from the published store with at most one LLM call."""
    from runtime.query import QueryError, Runtime

    given = [int(e) if e.lstrip("-").isdigit() else e for e in entities] or None
    try:
        answer = Runtime.open(store_root).ask(question, entities=given, budget=budget,
                                              llm=llm_name, retrieval=retrieval, encoding=encoding,
                                              policy=policy, relation_weight=relation_weight,
                                              chain_boost=chain_boost)
    except (StoreError, QueryError) as exc:
        raise click.ClickException(str(exc)) from None
    if as_json:
        click.echo(answer.to_json(indent=2))
        return
    click.echo(render_answer(answer))


def render_answer(answer) -> str:
    """The answer, then the audit line: status, linked entities, tokens, calls, time."""
    linked = ", ".join(f"{link['name']} [{link['method']}]" for link in answer.linked) or "none"
    tokens = answer.tokens
    lines = [("; ".join(answer.answers) if answer.answers else "(no answer)")
             + (f"   [fallback: {answer.fallback_reason}]" if answer.fallback else ""),
             f"  status {answer.status}: {answer.message}",
             f"  linked: {linked}",
             f"  tokens: prompt {tokens['prompt']} (knowledge {tokens['knowledge']} of budget "
             f"{tokens['budget']}, naive {tokens['naive']}, TCR {tokens['tcr']:.2f}), "
             f"completion {tokens['completion']}; LLM calls {answer.llm_calls} "
             f"({answer.llm['backend']})",
             f"  triples used: {len(answer.triples)}; {answer.timings.get('total', 0):.1f} ms; "
             f"build {answer.build_id}"]
    route = answer.route
    if route is not None:
        chain = " -> ".join(route.get("chain") or []) or "none"
        lines.append(f"  policy {answer.policy}: source {route.get('source') or 'retrieval'}, "
                     f"chain {chain} (vote share {route.get('vote_share', 0):.2f})"
                     + (", FLAGGED by the consistency check" if route.get("flagged") else "")
                     + (f"; {route['reason']}" if route.get("reason") else ""))
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
@cli.command(context_settings={"ignore_unknown_options": True, "allow_extra_args": True},
             add_help_option=False)
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def serve(args: tuple[str, ...]) -> None:
    """Serve the store over HTTP (FastAPI; `lokg serve --help` for options)."""
    from runtime.server import serve_command

    serve_command.main(list(args), prog_name="lokg serve")


# ---------------------------------------------------------------------------------------------
@cli.command()
@click.option("--workdir", type=click.Path(file_okay=False),
              help="Where to put the synthetic dump and the store (default: a temp dir).")
@click.option("--triples", "n_triples", type=click.IntRange(min=100), default=20_000,
              show_default=True)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--llm", "llm_name", default="local", show_default=True,
              help="Reader for the demo question (local = the embedded SmolLM2).")
def demo(workdir: str | None, n_triples: int, seed: int, llm_name: str) -> None:
    """The embedded default end to end: synthetic KG → build → publish → one question answered."""
    from runtime import pipeline
    from runtime.query import Runtime
    from runtime.synth import generate

    root = Path(workdir or tempfile.mkdtemp(prefix="lokg-demo-"))
    dump = root / "dump"
    click.echo(f"[1/4] generating a synthetic KG with {n_triples:,} triples in {dump}")
    generate(dump, n_triples=n_triples, seed=seed, malformed_rate=0.001, gzip=True)
    click.echo("[2/4] building the store (Spark local)")
    config = load_config(None, ["ingest.format=synth"])
    try:
        published = pipeline.build(str(dump), str(root / "store"), config, log=click.echo)
    except (pipeline.BuildError, StoreError) as exc:
        raise click.ClickException(str(exc)) from None
    click.echo("[3/4] verifying the published store")
    Store(root / "store").build(verify=True)
    click.echo(render_summary(published))
    first = json.loads((dump / "questions.jsonl").read_text(encoding="utf-8").splitlines()[0])
    click.echo(f"[4/4] asking the store, reader '{llm_name}': {first['question']}")
    answer = Runtime.open(root / "store").ask(first["question"], llm=llm_name)
    click.echo(render_answer(answer))
    click.echo(f"  gold answer: {'; '.join(first['answers'])}")


from evaluation.cli import eval_command  # noqa: E402  (light: no torch, pyspark, matplotlib)

cli.add_command(eval_command)


def main() -> None:
    cli(prog_name="lokg")


if __name__ == "__main__":
    sys.exit(main())
