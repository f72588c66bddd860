"""The ``lokg`` command line. Heavy modules (pyspark) load only inside the commands needing them."""

from __future__ import annotations

import sys

import click

from lokg.runtime.config import DEFAULT_BUDGET, ENCODINGS, MAX_BUDGET, POLICIES, RETRIEVALS
from lokg.runtime.contract import (MANIFEST_FILE, Build, Store, StoreError, is_url,
                                   stray_entries)
from lokg.runtime.object_store import RemoteStore, open_store
from lokg.runtime.environment import apply_defaults
from lokg.runtime.errors import disk_error_line
from lokg.runtime.feedback import KINDS as FEEDBACK_KINDS

STORE_OPTION = click.option(
    "--store", "store_root", envvar="LOKG_STORE", default="lokg_store", show_default=True,
    type=click.Path(file_okay=False),
    help="Store root: a directory or s3://bucket/prefix (env LOKG_STORE).",
)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="lokg")
def cli() -> None:
    """LOKG: one-call, token-budgeted question answering over knowledge graphs."""
    apply_defaults()  # Spark's Python, the tokenizer cache, offline models: no env script


# ---------------------------------------------------------------------------------------------
# ---------------------------------------------------------------------------------------------
@cli.group()
def store() -> None:
    """Inspect, verify and roll back published builds; collect abandoned staging."""


@store.command("list")
@STORE_OPTION
def store_list(store_root: str) -> None:
    """List complete builds, newest last; '*' marks CURRENT.

    A build whose manifest cannot be read is listed with '!' and its error, the others still
    are, and the command then exits 1, so a script notices the damaged build.
    """
    try:
        st = open_store(store_root)
        current = st.current_id()
        ids = st.build_ids()
    except StoreError as exc:
        raise click.ClickException(str(exc)) from None
    if not ids:
        raise click.ClickException(f"{st.root}: no builds")
    bad = [build_id for build_id in ids if not _list_line(st, build_id, current)]
    if bad:
        raise click.ClickException(f"{len(bad)} of {len(ids)} builds unreadable: "
                                   f"{', '.join(bad)}")


def _list_line(st: Store, build_id: str, current: str | None) -> bool:
    """Print a build's line of ``store list``; False (and its error on the line) if unreadable."""
    mark = "*" if build_id == current else " "
    try:
        manifest = st.build(build_id).manifest
        rows = ", ".join(f"{t}={e['rows']}" for t, e in sorted(manifest["tables"].items()))
        created = manifest["created_at"]
    except StoreError as exc:
        click.echo(f"! {build_id}  unreadable: {exc}")
        return False
    except (KeyError, TypeError, AttributeError) as exc:
        click.echo(f"! {build_id}  unreadable: {st.builds_dir / build_id / MANIFEST_FILE}: "
                   f"malformed manifest ({type(exc).__name__}: {exc})")
        return False
    click.echo(f"{mark} {build_id}  {created}  {rows}")
    return True


@store.command("verify")
@click.argument("build_id", required=False)
@STORE_OPTION
def store_verify(build_id: str | None, store_root: str) -> None:
    """Check schema version, schemas and every file's sha256 (default: the CURRENT build)."""
    try:
        built = open_store(store_root).build(build_id, verify=True)
    except StoreError as exc:
        raise click.ClickException(f"verify failed: {exc}") from None
    click.echo(f"ok: build {built.build_id}, {len(built.manifest['files'])} files verified")


@store.command("rollback")
@click.argument("build_id")
@STORE_OPTION
def store_rollback(build_id: str, store_root: str) -> None:
    """Point CURRENT at an earlier complete build (verified first)."""
    try:
        built = open_store(store_root).rollback(build_id)
    except StoreError as exc:
        raise click.ClickException(f"rollback refused: {exc}") from None
    except OSError as exc:  # a read-only store
        raise disk_refusal(exc, f"rollback refused: store {store_root}") from None
    click.echo(f"CURRENT -> {built.build_id}")


@store.command("gc")
@click.option("--older-than", "hours", type=click.FloatRange(min=0), default=48.0,
              show_default=True, help="Only staging directories unchanged for this many hours.")
@click.option("--keep", type=click.IntRange(min=0), default=None,
              help="Also run retention: delete builds beyond this many previous ones "
                   "(CURRENT and builds a reader pins are kept).")
@STORE_OPTION
def store_gc(hours: float, keep: int | None, store_root: str) -> None:
    """Delete the staging directories of killed or abandoned builds (and, with --keep, old
    builds).

    Publish removes its own build's staging; this collects what runs that never published
    left behind. Keep --older-than above the longest stage's run time (tasks time out
    after 12 h).
    """
    try:
        st = open_store(store_root)
        for stray in stray_entries(st.root) if isinstance(st, Store) else []:
            click.echo(f"warning: skipped {stray}: not a directory "
                       f"({'a symlink' if stray.is_symlink() else 'a file'}); gc never follows "
                       "nor deletes it, remove it by hand if it does not belong there")
        removed = st.collect_staging(hours * 3600)
        builds = st.collect_garbage(keep) if keep is not None else []
    except StoreError as exc:
        raise click.ClickException(str(exc)) from None
    except OSError as exc:  # a read-only store
        raise disk_refusal(exc, f"gc failed: store {store_root}") from None
    for name in removed:
        click.echo(f"removed {st.root / 'staging' / name}")
    click.echo(f"{len(removed)} staging director{'y' if len(removed) == 1 else 'ies'} removed")
    for name in builds:
        click.echo(f"removed build {name}")
    if keep is not None:
        click.echo(f"{len(builds)} build{'' if len(builds) == 1 else 's'} removed by retention")


def disk_refusal(exc: OSError, where: str) -> click.ClickException:
    """The one-line error of a full or read-only disk met writing ``where``; any other OSError
    is raised again as it is (a bug: its traceback is wanted)."""
    line = disk_error_line(exc, where)
    if line is None:
        raise exc
    return click.ClickException(line)


@store.command("show")
@click.argument("build_id", required=False)
@STORE_OPTION
def store_show(build_id: str | None, store_root: str) -> None:
    """Print the summary of a build (default: CURRENT)."""
    try:
        click.echo(render_summary(open_store(store_root).build(build_id)))
    except StoreError as exc:
        raise click.ClickException(str(exc)) from None


@store.command("push")
@click.argument("local_store", type=click.Path(file_okay=False, exists=True))
@click.argument("url")
@click.option("--build-id", help="Build to push (default: the local store's CURRENT).")
@click.option("--keep", type=click.IntRange(min=0), default=3, show_default=True,
              help="Previous builds retention keeps on the object store.")
def store_push(local_store: str, url: str, build_id: str | None, keep: int) -> None:
    """Publish a local build to an object store (s3://bucket/prefix): files, manifest, then
    CURRENT by a conditional write; refused if another publisher moved CURRENT meanwhile."""
    try:
        built = Store(local_store).build(build_id)
        RemoteStore(url).publish(built, keep=keep)
    except StoreError as exc:
        raise click.ClickException(f"push refused: {exc}") from None
    click.echo(f"{url} CURRENT -> {built.build_id}")


@store.command("pull")
@click.argument("url")
@click.argument("local_dir", type=click.Path(file_okay=False))
@click.option("--build-id", help="Build to pull (default: the object store's CURRENT).")
def store_pull(url: str, local_dir: str, build_id: str | None) -> None:
    """Download a published build (every object's sha256 checked) into LOCAL_DIR, a local
    store whose CURRENT names it; an intact copy already there is kept."""
    try:
        pulled = RemoteStore(url).pull(local_dir, build_id)
    except StoreError as exc:
        raise click.ClickException(f"pull failed: {exc}") from None
    click.echo(f"{local_dir}: CURRENT -> {pulled}")


#: The figures of each stage's report worth a line in a build summary.
SUMMARY_KEYS = {
    "documents": ("format", "documents", "chunks", "rejected"),
    "triple_extract": ("backend", "triples", "failed_chunks", "cost"),
    "feedback_enrich": ("sub_questions", "enriched", "answered", "delta_triples_new",
                        "skipped_log_lines", "nothing_to_enrich"),
    "ingest": ("format", "lines", "malformed", "entities", "relations", "triples",
               "feedback_edges_added", "feedback_nodes_added"),
    "entity_types": ("rule", "typed_entities", "distinct_types"),
    "transe": ("trainer", "device", "epochs", "converged", "final_loss"),
    "relation_stats": ("candidate_pairs",),
    "scos_merge": ("R0", "R_star", "rho_hat", "L_info"),
    "node_gain": (),
    "entity_encode": ("entities", "device"),
    "triple_context": ("triple_sources", "restored", "head_in_a_source"),
    "gat": (),
    "path_cache": (),
    "relation_knowledge": (),
}  # in stage order (the summary lists stages so)


def render_summary(built: Build) -> str:
    """Human-readable build summary: tables, then each stage's time, peak RSS (where the
    record has one) and key figures."""
    manifest = built.manifest
    lines = [f"build {built.build_id}  ({manifest['created_at']})  at {built.path}"]
    for table, entry in sorted(manifest["tables"].items()):
        lines.append(f"  {table:<15} {entry['rows']:>12,} rows")
    stages = manifest.get("report", {}).get("stages", {})
    refresh = manifest.get("report", {}).get("refresh", {})
    made = refresh.get("stages", {})
    for stage, rep in sorted(stages.items(), key=lambda kv: list(SUMMARY_KEYS).index(kv[0])
                             if kv[0] in SUMMARY_KEYS else len(SUMMARY_KEYS)):
        figures = ", ".join(f"{k}={_fmt(rep[k])}" for k in SUMMARY_KEYS.get(stage, ()) if k in rep)
        how = f"{made[stage]:<8}" if stage in made else ""
        peak = f"{rep['peak_rss_mb']:>7,.0f} MiB  " if rep.get("peak_rss_mb") else ""
        lines.append(f"  stage {stage:<15} {rep['seconds']:>7.1f}s  {how}{peak}{figures}")
    return "\n".join(lines + refresh_lines(refresh) + feedback_lineage_lines(built))


def refresh_lines(refresh: dict) -> list[str]:
    """How the build was made: in full, or refreshed from which build."""
    if not refresh:
        return []  # a build from before refreshes existed
    if refresh.get("base") is None:
        return ["  refresh: full build (no previous build reused)"]
    lines = [f"  refresh: from build {refresh['base']}"]
    changes = refresh.get("changes")
    if changes is not None:
        lines.append("  changes: " + (", ".join(f"{part.replace('_', ' ')} {n:,}"
                                                for part, n in changes.items() if n)
                                      or "none (the same graph as the previous build)"))
    return lines


#: Lineage rows a build summary prints (the table has them all).
LINEAGE_SHOWN = 20


def feedback_lineage_lines(built: Build) -> list[str]:
    """Which feedback produced which triple: "h -r-> t  <- feedback id (delta, sentence)"."""
    if not built.manifest["tables"].get("feedback_lineage", {}).get("rows"):
        return []
    rows = built.read("feedback_lineage").to_pylist()
    names = built.read("entities", columns=["name"])["name"].to_pylist()
    relations = built.read("relations", columns=["name"])["name"].to_pylist()
    sentences = {}
    if built.manifest["tables"].get("sentences", {}).get("rows"):
        table = built.read("sentences", columns=["sentence_id", "text"])
        sentences = dict(zip(table["sentence_id"].to_pylist(), table["text"].to_pylist()))
    lines = [f"  feedback lineage: {len(rows)} (triple, feedback) pairs"]
    for row in rows[:LINEAGE_SHOWN]:
        lines.append(f"    {names[row['s']]} -{relations[row['r']]}-> {names[row['o']]}  <- "
                     f"feedback {row['feedback_id']} (delta {row['delta_id']}: "
                     f"\"{sentences.get(row['sentence_id'], '')}\")")
    return lines


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
@click.option("--budget", type=click.IntRange(1, MAX_BUDGET), default=DEFAULT_BUDGET,
              show_default=True,
              help="Knowledge budget B in cl100k_base tokens (the prompt adds a fixed overhead).")
@click.option("--llm", "llm_name", default="none", show_default=True,
              help="Reader: local (embedded SmolLM2), openai (LOKG_LLM_BASE_URL/MODEL/API_KEY) "
                   "or none (top retrieval answer, no call).")
@click.option("--entity", "entities", multiple=True,
              help="Entity id or key to ask about (repeatable); skips linking.")
@click.option("--retrieval", default="taimr", show_default=True,
              type=click.Choice(RETRIEVALS))
@click.option("--encoding", default="ittc", show_default=True, type=click.Choice(ENCODINGS))
@click.option("--policy", default=None, type=click.Choice(POLICIES),
              help="lokg: one call on the LOKG context; precision: the answer derived from the "
                   "graph where the precision gate passes, else abstain (no call); route: derived "
                   "where the precision gate passes, else one call (stage relation_knowledge). "
                   "Default: route on a store with relation knowledge, else lokg.")
@click.option("--relation-weight", type=click.FloatRange(min=0), default=None,
              help="λ_rel of the query-relation term (default: the store's query.relation_weight).")
@click.option("--chain-boost/--no-chain-boost", default=None,
              help="ITTC boost of the predicted chain's facts (default: query.chain_boost).")
@click.option("--source-sentences/--no-source-sentences", default=True, show_default=True,
              help="Offer each triple's restored source sentence (stores built from documents) "
                   "as its verbose rendering.")
@click.option("--json", "as_json", is_flag=True, help="Print the whole Answer as JSON.")
def query(question: str, store_root: str, budget: int, llm_name: str, entities: tuple[str, ...],
          retrieval: str, encoding: str, policy: str | None, relation_weight: float | None,
          chain_boost: bool | None, source_sentences: bool, as_json: bool) -> None:
    """Answer QUESTION from the published store with at most one LLM call."""
    from lokg.runtime.query import QueryError, Runtime

    given = [int(e) if e.lstrip("-").isdigit() else e for e in entities] or None
    try:
        answer = Runtime.open(store_root).ask(question, entities=given, budget=budget,
                                              llm=llm_name, retrieval=retrieval, encoding=encoding,
                                              policy=policy, relation_weight=relation_weight,
                                              chain_boost=chain_boost,
                                              source_sentences=source_sentences)
    except (StoreError, QueryError) as exc:
        raise click.ClickException(str(exc)) from None
    if as_json:
        click.echo(answer.to_json(indent=2))
        return
    click.echo(render_answer(answer))


#: Triples an answer's evidence line shows (the derived chain's facts, or the top of the context).
EVIDENCE_TRIPLES = 4
#: Distinct source sentences ``lokg query`` prints as citations (--json has them all).
CITATIONS_SHOWN = 3
CITATION_CHARS = 200


def render_answer(answer) -> str:
    """The answer, then the audit lines: status, linked entities, tokens, calls, time, the
    route, and the evidence (the triples used, best first)."""
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
    if answer.triples:
        shown = answer.triples[:EVIDENCE_TRIPLES]
        lines.append("  evidence: " + "; ".join(f"{t['s']} --{t['r']}--> {t['o']}" for t in shown)
                     + (f" (+{len(answer.triples) - len(shown)} more)"
                        if len(answer.triples) > len(shown) else ""))
    lines.extend(_citation_lines(answer.citations))
    return "\n".join(lines)


def _citation_lines(citations: list[dict]) -> list[str]:
    """``[1] "Title": sentence`` for the first distinct sources of the triples used."""
    seen = list(dict.fromkeys((c["title"], c["sentence"]) for c in citations))
    shown = seen[:CITATIONS_SHOWN]
    lines = [f"  [{i}] \"{title}\": " + (sentence if len(sentence) <= CITATION_CHARS
                                         else sentence[:CITATION_CHARS - 1] + "…")
             for i, (title, sentence) in enumerate(shown, 1)]
    if len(seen) > len(shown):
        lines.append(f"  (+{len(seen) - len(shown)} more sources: --json)")
    return (["  sources:"] + lines) if lines else []


# ---------------------------------------------------------------------------------------------
@cli.command(context_settings={"ignore_unknown_options": True, "allow_extra_args": True},
             add_help_option=False)
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def serve(args: tuple[str, ...]) -> None:
    """Serve the store over HTTP (FastAPI; `lokg serve --help` for options)."""
    from lokg.runtime.server import serve_command

    serve_command.main(list(args), prog_name="lokg serve")


# ---------------------------------------------------------------------------------------------
@cli.group("feedback")
def feedback_group() -> None:
    """What questions found missing: the feedback log beside the builds."""


FEEDBACK_DIR_OPTION = click.option(
    "--dir", "log_directory", type=click.Path(file_okay=False), default=None,
    help="The log directory (default: <store>/feedback/log; an s3:// store: its local cache's).")


def _read_feedback(store_root: str, log_directory: str | None):
    """The log of ``store_root`` (or ``log_directory``), skipped lines reported on stderr."""
    from lokg.runtime import feedback, object_store

    if log_directory is None:
        base = object_store.cache_root(store_root) if is_url(store_root) else store_root
        log_directory = str(feedback.log_dir(base))
    read = feedback.read_log(log_directory)
    for where, why in read.skipped[:5]:
        click.echo(f"skipped {where}: {why}", err=True)
    if len(read.skipped) > 5:
        click.echo(f"skipped {len(read.skipped) - 5} more lines", err=True)
    return read


@feedback_group.command("list")
@STORE_OPTION
@FEEDBACK_DIR_OPTION
@click.option("--limit", type=click.IntRange(min=0), default=20, show_default=True,
              help="The newest records shown (0 = all).")
@click.option("--kind", type=click.Choice(FEEDBACK_KINDS),
              default=None, help="Only records of this kind.")
@click.option("--json", "as_json", is_flag=True, help="One JSON record per line.")
def feedback_list(store_root: str, log_directory: str | None, limit: int, kind: str | None,
                  as_json: bool) -> None:
    """List the feedback records, newest last: what each question found missing."""
    import json

    from lokg.runtime.feedback import fact_text

    records = [r for r in _read_feedback(store_root, log_directory).records
               if kind is None or r["kind"] == kind]
    for r in records[-limit if limit else 0:]:
        if as_json:
            click.echo(json.dumps(r, ensure_ascii=False))
            continue
        what = [fact_text(m) for m in r["missing"]] or [f"mention: {m}" for m in r["mentions"]]
        click.echo(f"{r['time']}  {r['kind']:<13} {r['build_id']}  {'; '.join(what)}")


@feedback_group.command("stats")
@STORE_OPTION
@FEEDBACK_DIR_OPTION
def feedback_stats(store_root: str, log_directory: str | None) -> None:
    """Counts of the log as JSON: records by kind, missing facts, top relations, builds."""
    import json

    from lokg.runtime import feedback

    click.echo(json.dumps(feedback.stats(_read_feedback(store_root, log_directory)), indent=2))


if __name__ == "__main__":
    sys.exit(cli(prog_name="lokg"))
