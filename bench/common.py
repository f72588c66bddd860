"""What the benchmark scripts share (run each as ``python -m bench.<name>`` from the
repository's root): measuring a process tree's time and memory, comparing tables, the
stages' Spark-path settings, questions made from a store, a small graph's stage inputs,
answering a question set through the runtime."""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import re
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from lokg.runtime.contract import Store, read_table, to_numpy
from lokg.testing import REPO

if TYPE_CHECKING:
    import psutil

    from lokg.runtime.query import Runtime


# ---------------------------------------------------------------------------------- measuring

SAMPLE_SECONDS = 0.2


def child_env(code: Path = REPO) -> dict[str, str]:
    """The environment of a child that imports the checkout ``code``, not the one the shared
    venv's editable install points at; its Spark workers run that checkout's own Python where
    it has a venv (``infra/env.sh`` points them at the shell's checkout)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (str(code), os.environ.get("PYTHONPATH")) if p)}
    python = Path(code) / ".venv" / "bin" / "python"
    if python.exists():
        env["PYSPARK_PYTHON"] = env["PYSPARK_DRIVER_PYTHON"] = str(python)
    return env


def checkout_python(code: Path) -> Path:
    """The interpreter of the checkout ``code``'s own venv: its editable install maps ``lokg``'s
    folders to that checkout (``PYTHONPATH`` alone would not switch them); refused without."""
    python = Path(code) / ".venv" / "bin" / "python"
    if not python.exists():
        raise SystemExit(f"checkout {code}: no .venv/bin/python (set the checkout up first)")
    return python


class TreeMeter:
    """Samples a process tree (the process, the Spark JVM, its Python workers): resident bytes
    now, and CPU seconds its processes used since the last sample (a process first seen counts
    all its CPU so far; one ending between samples loses at most a sample's worth)."""

    def __init__(self) -> None:
        self.cpu_seen: dict[int, float] = {}

    def sample(self, proc: psutil.Process) -> tuple[int, float]:
        import psutil

        rss, cpu_delta = 0, 0.0
        for p in (proc, *proc.children(recursive=True)):
            try:
                with p.oneshot():
                    rss += p.memory_info().rss
                    times = p.cpu_times()
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
            cpu = times.user + times.system
            cpu_delta += cpu - self.cpu_seen.get(p.pid, 0.0)
            self.cpu_seen[p.pid] = cpu
        return rss, cpu_delta


def run_measured(argv: list[str], log: Path, code: Path = REPO) -> dict:
    """Run ``argv`` to completion in the checkout ``code``, its output to ``log``; wall and CPU
    seconds, the sampled peak RSS of its process tree and the 1-minute load average before and
    after. A non-zero exit raises with the log's tail."""
    import psutil

    load_before, meter = os.getloadavg()[0], TreeMeter()
    started, peak, cpu = time.perf_counter(), 0, 0.0
    with log.open("w") as out:
        child = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, cwd=code,
                                 env=child_env(code))
        proc = psutil.Process(child.pid)
        while child.poll() is None:
            try:
                rss, used = meter.sample(proc)
                peak, cpu = max(peak, rss), cpu + used
            except psutil.NoSuchProcess:
                pass
            time.sleep(SAMPLE_SECONDS)
    if child.returncode:
        tail = log.read_text(errors="replace")[-2000:]
        raise SystemExit(f"{' '.join(argv[:4])} … failed ({child.returncode}); {log}:\n{tail}")
    return {"wall_s": round(time.perf_counter() - started, 2), "cpu_s": round(cpu, 2),
            "peak_mib": round(peak / 2**20, 1),
            "load": [round(load_before, 2), round(os.getloadavg()[0], 2)]}


def dump_for(work: Path, n_triples: int, seed: int, questions: int) -> Path:
    """The dump of ``n_triples`` (generated once, reused when its manifest is there)."""
    from lokg.pipeline.synth import generate

    dump = work / f"dump-{n_triples}"
    if not (dump / "manifest.json").exists():
        generate(dump, n_triples=n_triples, seed=seed, n_questions=questions)
    return dump


STAGE_STARTED = re.compile(r"^\[(\d+)/(\d+)\] (\w+) …$")


STAGE_DONE = re.compile(r"^\[(\d+)/(\d+)\] (\w+) done in ([\d.]+)s$")


class StageMeter:
    """Wall, CPU and peak tree memory of one ``lokg build`` process, per stage of its log."""

    def __init__(self) -> None:
        self.rows: list[dict] = []
        self.tree = TreeMeter()
        self._open("start")

    def _open(self, stage: str) -> None:
        if self.rows:
            last = self.rows[-1]
            last["wall_s"] = round(time.perf_counter() - last.pop("_started"), 2)
            last["load"].append(round(os.getloadavg()[0], 2))
        self.rows.append({"stage": stage, "stage_s": None, "cpu_s": 0.0, "peak_mib": 0.0,
                          "load": [round(os.getloadavg()[0], 2)],
                          "_started": time.perf_counter()})

    def line(self, text: str) -> None:
        """A line of the build's log: a stage starts, or one ends (the last: publish starts)."""
        if started := STAGE_STARTED.match(text):
            self._open(started[3])
        elif done := STAGE_DONE.match(text):
            self.rows[-1]["stage_s"] = float(done[4])
            if done[1] == done[2]:
                self._open("publish")

    def sample(self, proc: psutil.Process) -> None:
        """Charge the tree's resident memory and its CPU since the last sample to the stage."""
        rss, used = self.tree.sample(proc)
        row = self.rows[-1]
        row["cpu_s"] += used
        row["peak_mib"] = max(row["peak_mib"], round(rss / 2**20, 1))

    def finish(self) -> list[dict]:
        self._open("end")
        for row in self.rows[:-1]:
            row["cpu_s"] = round(row["cpu_s"], 2)
        return self.rows[:-1]


def build_one_process(dump: Path, store: Path, overrides: list[str], log: Path) -> list[dict]:
    """``lokg build`` as a user runs it, measured per stage (``StageMeter``)."""
    import psutil

    argv = ["lokg", "build", "--dump", str(dump), "--store", str(store)]
    argv += [arg for kv in overrides for arg in ("--set", kv)]
    meter = StageMeter()
    env = {**child_env(), "PYTHONUNBUFFERED": "1"}
    with log.open("w") as out:
        child = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                 cwd=REPO, env=env, text=True)

        def follow() -> None:
            for text in child.stdout:
                out.write(text)
                meter.line(text.rstrip("\n"))

        reader = threading.Thread(target=follow, daemon=True)
        reader.start()
        proc = psutil.Process(child.pid)
        while child.poll() is None:
            try:
                meter.sample(proc)
            except psutil.NoSuchProcess:
                pass
            time.sleep(SAMPLE_SECONDS)
        reader.join()
    if child.returncode:
        tail = log.read_text(errors="replace")[-2000:]
        raise SystemExit(f"lokg build failed ({child.returncode}); {log}:\n{tail}")
    return meter.finish()


def write_results(rows: list[dict], table: str, json_path: Path | None,
                  markdown_path: Path | None) -> None:
    """Append ``rows`` to the JSON-lines file, print ``table`` and write it to the Markdown one."""
    if json_path:
        with json_path.open("a") as out:
            for row in rows:
                out.write(json.dumps(row) + "\n")
    if table:
        print(table)
    if markdown_path:
        markdown_path.write_text(table)


# ------------------------------------------------------------------------- tables and stages

#: Float cells are compared to this many decimal places: Spark sums in partition order, so a
#: near-zero NMI comes out 4.9993e-13 in one run and 5.0004e-13 in another of the same input.
FLOAT_DIGITS = 9


def table_equality(one, other) -> dict:
    """Two tables (pyarrow) compared as multisets of rows: row counts and how many rows one
    has that the other lacks, both ways."""
    mine, theirs = (Counter(map(repr, _rows(t))) for t in (one, other))
    return {"rows": [one.num_rows, other.num_rows],
            "only_refresh": sum((mine - theirs).values()),
            "only_full": sum((theirs - mine).values()),
            "equal": mine == theirs}


def _rows(table) -> list[tuple]:
    """Rows as tuples, floats rounded to ``FLOAT_DIGITS`` places."""
    columns = [[round(v, FLOAT_DIGITS) if isinstance(v, float) else v
                for v in table.column(c).to_pylist()] for c in table.column_names]
    return list(zip(*columns))


#: A stage run in a child process: ``python -c RUN CONFIG_JSON INPUTS_JSON OUT STAGE`` prints
#: the stage's report as JSON.
RUN = ("import json, sys\nfrom importlib import import_module\n"
       "config, inputs, out = json.loads(sys.argv[1]), json.loads(sys.argv[2]), sys.argv[3]\n"
       "report = import_module('lokg.spark_jobs.' + sys.argv[4]).run(config, inputs, out)['report']\n"
       "print(json.dumps(report, default=str))\n")


# --------------------------------------------------------------------- questions from a store

def store_questions(store_root: str | Path, limit: int = 500) -> list[str]:
    """Questions naming entities of the CURRENT build (evenly spread over its ids)."""
    names = Store(store_root).build().read("entities", columns=["name"]).column("name").to_pylist()
    step = max(1, len(names) // limit)
    return [f"What is {name} related to?" for name in names[::step][:limit] if name]


def read_questions(path: str | Path) -> list[str]:
    """A questions file: one per line, plain or a JSON object with a ``question``."""
    out = []
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if line:
            out.append(json.loads(line)["question"] if line.startswith("{") else line)
    return out


def sampled_facts(rt: Runtime, n: int, seed: int) -> list[tuple[int, int]]:
    """(subject, relation) of ``n`` random triples of the store (seeded)."""
    triples = rt.build.read("triples")
    rng = np.random.default_rng(seed)
    rows = rng.choice(triples.num_rows, size=min(n, triples.num_rows), replace=False)
    # contract.to_numpy: pyarrow's own imports pandas, which the runtime's figures would count
    return list(zip(to_numpy(triples.column("s"))[rows].tolist(),
                    to_numpy(triples.column("r"))[rows].tolist()))


def fact_question(rt: Runtime, s: int, r: int) -> str:
    """"what is the <last words of the relation name> of <name of s>?"."""
    words = rt.relation_names[r].rstrip("./").split("/")[-1].split(".")[-1].replace("_", " ")
    return f"what is the {words} of {rt.names[s]}?"


# ------------------------------------------------------------------ graphs, stores, answering

def build_graph(dump: Path, fmt: str, workdir: Path) -> tuple[dict, dict]:
    """ingest → node_gain → uniform edges; returns (stage inputs, facts about the graph)."""
    from lokg.pipeline import driver as pipeline
    from lokg.pipeline.config import load_config
    from lokg.runtime.contract import new_build_id, write_table
    from lokg.runtime.taimr import uniform_edges
    from lokg.spark_jobs import node_gain
    from lokg.spark_jobs.engine import with_engine

    config = load_config(None, [f"ingest.format={fmt}", "ingest.max_malformed_share=0"])
    started = time.perf_counter()
    record = pipeline.run_stage(Store(workdir / "store"), new_build_id(), "ingest", config, str(dump))
    inputs = dict(record["outputs"])
    ingest_s = time.perf_counter() - started
    started = time.perf_counter()
    inputs.update(node_gain.run(with_engine(config, dump), inputs,
                                str(workdir / "node_gain"))["outputs"])
    node_gain_s = time.perf_counter() - started
    edges = uniform_edges(read_table(Path(inputs["triples"]), "triples"))
    inputs["edges"] = str(workdir / "edges.parquet")
    write_table("edges", edges, Path(inputs["edges"]))
    return inputs, {"ingest_s": round(ingest_s, 1), "node_gain_s": round(node_gain_s, 1)}


def dump_facts(dump: Path) -> dict[tuple[str, str], set[str]]:
    """(subject key, relation name) → object keys of every triple of an FB15k-237 dump."""
    from lokg.pipeline.dump_edit import FB15K237_SPLITS

    facts: dict[tuple[str, str], set[str]] = {}
    for name in FB15K237_SPLITS:
        for line in (dump / name).read_text(encoding="utf-8").splitlines():
            s, r, o = line.split("\t")
            facts.setdefault((s, r), set()).add(o)
    return facts


def hits(store: str, facts: dict, asked: list[tuple[str, str]]) -> list[bool]:
    """Whether the store's top answer (reader none) to each asked fact is one of its objects."""
    from lokg.runtime.query import Runtime

    rt = Runtime.open(store)
    ids = {key: i for i, key in enumerate(rt.keys)}
    right = []
    for s, r in asked:
        words = r.rstrip("./").split("/")[-1].split(".")[-1].replace("_", " ")
        answer = rt.ask(f"what is the {words} of {rt.names[ids[s]]}?", entities=[ids[s]],
                        llm="none")
        right.append(bool(answer.answer_ids) and rt.keys[answer.answer_ids[0]] in facts[(s, r)])
    return right


def answer_all(store: Path, questions, out: Path, progress: bool, reader: str = "none",
               build_id: str | None = None, online: tuple[str, dict] | None = None,
               settings: dict | None = None) -> dict:
    """Every question through ``Runtime.ask(q, llm=reader)`` with the runtime's defaults (and
    ``settings``, query settings over them), scored as a reading run (evaluation.runner; the
    runtime logs its own feedback) — or, ``online`` (source, config), through the tcr-qf loop
    around that ask (evaluation/tcr_qf.py)."""
    from lokg.evaluation.context import CountingLLM
    from lokg.evaluation.methods import _prediction
    from lokg.evaluation.runner import evaluate
    from lokg.evaluation.tcr_qf import Enricher, online_prediction
    from lokg.runtime.llm import make_llm
    from lokg.runtime.query import Runtime

    rt = Runtime.open(store, build_id=build_id, **(settings or {}))
    llm = CountingLLM(make_llm(reader))
    loop = None if online is None else Enricher(rt, source=online[0], config=online[1],
                                                work=out / "work")

    def ask(question):
        llm.reset()
        if loop is None:
            return _prediction(llm, question, rt.ask(question.question, llm=llm), None)
        result = loop.answer(rt, lambda view: view.ask(question.question, llm=llm))
        return online_prediction(_prediction(llm, question, result.answers[-1], None), result,
                                 llm)

    try:
        return evaluate({"lokg": ask}, questions, out, progress=progress, reading=True)["lokg"]
    finally:
        rt.close()


def stage_record(store: Path, build_id: str, stage: str) -> dict:
    """The stage record of ``stage`` staged for ``build_id`` in the store at ``store``."""
    from lokg.pipeline.driver import STAGE_RECORD

    path = Store(store).staging_dir(build_id) / stage / STAGE_RECORD
    return json.loads(path.read_text())


def attention_agreement(one: Path, other: Path) -> dict:
    """Pearson r and mean |Δα| of two edge tables, matched on (s, r, o, inverse)."""
    a, b = (read_table(p).to_pandas() for p in (one, other))
    both = a.merge(b, on=["s", "r", "o", "inverse"], suffixes=("_a", "_b"))
    return {"edges": len(both), "pearson": round(float(np.corrcoef(both.attention_a,
                                                                   both.attention_b)[0, 1]), 4),
            "mean_abs_diff": round(float((both.attention_a - both.attention_b).abs().mean()), 5)}


# --------------------------------------------------------------- stages on a Spark session

#: The setting that puts every relational stage on Spark SQL (``--paths spark``): the engine a
#: build on a cluster resolves to, forced at any size
SPARK_PATHS = ("engine.name=spark",)


#: ``spark``: the stages on Spark SQL (``SPARK_PATHS``); ``product``: the engine the build
#: resolves from the dump's size, as a build of that size would
PATHS = ("spark", "product")


def _status_kib(pid: int, field: str) -> int:
    """A process's /proc status field, in KiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"/proc/{pid}/status has no {field}")


class Peaks:
    """Peak RSS of the driver and the Spark JVM over one step (VmHWM, reset before the step)."""

    def __init__(self, spark):
        jvm = spark.sparkContext._gateway.proc.pid
        comm = Path(f"/proc/{jvm}/comm").read_text().strip()
        if comm != "java":  # spark-submit execs java; anything else would measure a wrapper
            raise RuntimeError(f"pyspark's gateway process {jvm} is {comm!r}, not the JVM")
        self.pids = {"driver": os.getpid(), "jvm": jvm}

    def reset(self) -> None:
        for pid in self.pids.values():
            Path(f"/proc/{pid}/clear_refs").write_text("5")  # 5: reset the peak RSS only

    def read(self) -> dict[str, float]:
        return {f"{who}_peak_mib": round(_status_kib(pid, "VmHWM") / 1024, 1)
                for who, pid in self.pids.items()}


def measured(peaks: Peaks, step):
    """Run ``step()``; return its result, wall seconds and the peaks during it."""
    peaks.reset()
    started = time.perf_counter()
    result = step()
    return result, round(time.perf_counter() - started, 2), peaks.read()


def start_spark(config: dict):
    """Start the session the stages will find active; returns (spark, seconds)."""
    from lokg.spark_jobs.session import get_spark

    started = time.perf_counter()
    spark = get_spark(config, "lokg-relation-stats-bench")
    return spark, round(time.perf_counter() - started, 2)


def bench_config(args, paths: str = "spark") -> dict:
    """The config of a stage bench: local[2], ``args.driver_memory``, the ``paths`` chosen
    (PATHS), then ``args.extra``."""
    from lokg.pipeline.config import load_config

    if paths not in PATHS:
        raise ValueError(f"paths must be one of {PATHS}, got {paths!r}")
    forced = SPARK_PATHS if paths == "spark" else ()
    return load_config(None, ["spark.master=local[2]", f"spark.driver_memory={args.driver_memory}",
                              *forced, *args.extra])


def machine() -> dict:
    """The CPU count and the load averages now."""
    return {"cpus": os.cpu_count(), "load_average": [round(x, 2) for x in os.getloadavg()]}


def spark_stages(config: dict, dump: Path, root: Path, peaks: Peaks) -> tuple[dict, dict, dict]:
    """ingest and entity_types through ``run_stage``, then relation_stats on their staged
    outputs (on the engine ``run_stage`` would resolve for ``dump``), in a store under
    ``root``; returns (per-stage timings, reports, artefact paths)."""
    from lokg.pipeline import driver as pipeline
    from lokg.runtime.contract import Store, new_build_id
    from lokg.spark_jobs import relation_stats
    from lokg.spark_jobs.engine import with_engine

    store, build_id = Store(root), new_build_id()
    stages, reports = {}, {}
    for name in ("ingest", "entity_types"):
        record, seconds, peak = measured(
            peaks, lambda: pipeline.run_stage(store, build_id, name, config, str(dump)))
        stages[name], reports[name] = {"seconds": seconds, **peak}, record["report"]
    inputs = pipeline.staged_outputs(pipeline.stage_records(store, build_id))
    out_dir = store.staging_dir(build_id) / "relation_stats"
    out_dir.mkdir(parents=True)
    result, seconds, peak = measured(
        peaks, lambda: relation_stats.run(with_engine(config, dump), inputs, str(out_dir)))
    reports["relation_stats"] = result["report"]
    stages["relation_stats"] = {"seconds": seconds, **peak,
                                "step_seconds": result["report"]["step_seconds"]}
    return stages, reports, {**inputs, **result["outputs"]}


def synth_dump(args, tmp: str, malformed_rate: float = 0.0) -> tuple[Path, float | None]:
    """``args.dump``, or a ``pipeline.synth`` dump of ``args.triples`` generated under ``tmp``;
    with the generation's seconds (None when reused)."""
    from lokg.pipeline.synth import generate

    if args.dump is not None:
        return args.dump, None
    dump = Path(tmp) / f"synth-{args.triples}"
    started = time.perf_counter()
    generate(dump, n_triples=args.triples, seed=args.seed, n_questions=0,
             malformed_rate=malformed_rate)
    return dump, round(time.perf_counter() - started, 2)


# ------------------------------------------------------- a stage of another checkout (baseline)

def _module(tree: Path, name: str):
    """``tree``'s spark_jobs/<name>.py, imported as ``baseline_<name>``."""
    spec = importlib.util.spec_from_file_location(
        f"baseline_{name}", tree / "spark_jobs" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


#: The helper modules a stage's baseline takes from its own tree as well: a stage's speed is
#: mostly in them (ingest's reading, parsing and tables).
BASELINE_HELPERS = {"ingest": ("formats", "ingest_sql", "ingest_tables", "ingest_read")}


def load_baseline(tree: Path, stage: str):
    """``tree``'s module of ``stage``; every name it bound to one of ``BASELINE_HELPERS`` (the
    helper module itself, or a name imported from it) is rebound to ``tree``'s own helper;
    its other imports resolve to this tree's modules."""
    module = _module(tree, stage)
    for helper in BASELINE_HELPERS.get(stage, ()):
        ours, theirs = importlib.import_module(f"lokg.spark_jobs.{helper}"), _module(tree, helper)
        for name, value in list(vars(module).items()):
            if value is ours:
                setattr(module, name, theirs)
            elif getattr(ours, name, None) is value and hasattr(theirs, name):
                setattr(module, name, getattr(theirs, name))
    return module


# --------------------------------------------------------------- path_cache's refresh reach


def touched_heads(now: np.ndarray, then: np.ndarray, hops: int) -> np.ndarray:
    """Sorted ids of the nodes within ``hops`` hops (walked back along ``now``'s edges) of a
    node whose out-edge rows (s, r, inverse, o, …) differ between the two tables (``then`` in
    ``now``'s ids, -1 for a node gone) — the reach the stage's refresh rule measures, on the
    driver, for a bench's counts."""
    from lokg.common.stage import changed_rows

    changed = changed_rows(now, then)[:, 0]
    changed = changed[changed >= 0]
    n_nodes = int(max(now[:, [0, 3]].max(initial=-1), then[:, [0, 3]].max(initial=-1))) + 1
    reached = np.zeros(n_nodes, bool)
    reached[changed] = True
    for _ in range(hops):
        reached[now[:, 0][reached[now[:, 3]]]] = True
    return np.flatnonzero(reached)


# --------------------------------------------------------------- ANN recall against exact search

def noisy_queries(vectors: np.ndarray, count: int, cosine: float, seed: int) -> np.ndarray:
    """Unit vectors at about ``cosine`` to ``count`` random rows of ``vectors``."""
    rng = np.random.default_rng(seed)
    rows = rng.choice(len(vectors), size=count, replace=False)
    dim = vectors.shape[1]
    sigma = np.sqrt((1 / cosine**2 - 1) / dim)  # |noise|² ≈ dim σ² gives that cosine
    queries = vectors[rows] + rng.normal(0, sigma, (count, dim)).astype(np.float32)
    return queries / np.linalg.norm(queries, axis=1, keepdims=True)


def recall(found: np.ndarray, exact: np.ndarray) -> dict:
    """recall@k (share of the exact top k found) and recall@1 (the same first hit)."""
    k = exact.shape[1]
    hits = [len(set(f) & set(e)) / k for f, e in zip(found.tolist(), exact.tolist())]
    return {"recall_at_k": round(float(np.mean(hits)), 4),
            "recall_at_1": round(float(np.mean(found[:, 0] == exact[:, 0])), 4)}
