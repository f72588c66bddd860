"""Refresh end to end (DESIGN §9): every stage of ``pipeline.build`` on a tiny synthetic dump,
then refreshes of the same store — an unchanged dump, and an edited one whose first attempt is
killed mid-way — compared with a full build of the same final dump."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from click.testing import CliRunner

from lokg.pipeline import driver as pipeline
from lokg.cli import cli
from lokg.pipeline.refresh import DETERMINISTIC_TABLES
from lokg.pipeline.config import load_config
from lokg.runtime.contract import Store
from lokg.pipeline.dump_edit import edit_synth_dump

pytestmark = [pytest.mark.spark, pytest.mark.slow]

#: float32 entity vectors (a partial encode then equals a full one), few epochs; the learned
#: stages train from scratch in a refresh (refresh_epochs 0), so what reads them equals a full
#: build too (their warm start: tests/test_refresh_learned.py)
CONFIG = ["ingest.format=synth", "gat.epochs=2", "transe.epochs=2",
          "transe.refresh_epochs=0", "gat.refresh_epochs=0",
          "entity_encode.encoder=torch", "entity_encode.query_onnx='off'"]


def spark_requests(monkeypatch) -> list[str]:
    """The app names of the Spark sessions stages ask for from now on (the session is still
    given): ``get_spark`` wrapped in ``spark_jobs.session`` and wherever it was imported."""
    import sys

    from lokg.spark_jobs import session

    asked: list[str] = []
    real = session.get_spark

    def recording(config, app_name="lokg"):
        asked.append(app_name)
        return real(config, app_name)

    for module in list(sys.modules.values()):
        if getattr(module, "get_spark", None) is real:
            monkeypatch.setattr(module, "get_spark", recording)
    return asked


class Killed(BaseException):
    """Stands for the SIGKILL of a stage process."""


def build(dump: Path, store: Path, build_id: str):
    return pipeline.build(str(dump), str(store), load_config(None, CONFIG), build_id=build_id,
                          log=lambda _: None)


def made(built) -> dict[str, str]:
    return built.manifest["report"]["refresh"]["stages"]


def rows(built, table: str) -> list:
    data = built.read(table)
    return sorted(data.to_pylist(), key=repr)


@pytest.fixture(scope="module")
def dumps(tmp_path_factory):
    from lokg.pipeline.synth import generate

    root = tmp_path_factory.mktemp("refresh-build")
    generate(root / "d1", n_triples=400, seed=3, n_questions=0)
    edit_synth_dump(root / "d1", root / "d2", remove_edges=6, add_edges=4, new_entities=2,
                    drop_entities=1, rename=1, seed=5)
    return root


@pytest.fixture(scope="module")
def first(dumps, spark):
    return build(dumps / "d1", dumps / "store", "b1")


def test_an_unchanged_dump_publishes_the_same_store_and_says_nothing_changed(dumps, first):
    second = build(dumps / "d1", dumps / "store", "b2")
    assert made(second) == {name: "full" if name == "feedback_enrich" else "reused"
                            for name in pipeline.STAGE_NAMES}
    assert second.manifest["tables"].keys() == first.manifest["tables"].keys()
    for table, entry in first.manifest["tables"].items():
        assert first.read(table).equals(second.read(table)), table
    assert set(second.manifest["report"]["refresh"]["changes"].values()) == {0}
    shown = CliRunner().invoke(cli, ["store", "show", "--store", str(dumps / "store")])
    assert "refresh: from build b1" in shown.output
    assert "changes: none" in shown.output


def test_a_killed_refresh_leaves_current_and_its_rerun_equals_a_full_build(dumps, first,
                                                                          monkeypatch):
    real = pipeline._load_module

    def killed_at_gat(name):
        if name == "gat":
            return SimpleNamespace(run=lambda *args: (_ for _ in ()).throw(Killed()))
        return real(name)

    store = Store(dumps / "store")
    before = store.current_id()
    with monkeypatch.context() as patch:
        patch.setattr(pipeline, "_load_module", killed_at_gat)
        with pytest.raises(Killed):
            build(dumps / "d2", dumps / "store", "b3")
    assert store.current_id() == before and store.refresh_base() == before
    store.build(before, verify=True)

    refreshed = build(dumps / "d2", dumps / "store", "b3")  # the rerun
    assert store.current_id() == "b3" and store.refresh_base() == "b3"
    assert made(refreshed)["ingest"] == made(refreshed)["entity_encode"] == "partial"
    changes = refreshed.manifest["report"]["refresh"]["changes"]
    assert changes["added_entities"] == 2 and changes["removed_entities"] == 1
    # ids shifted (an entity gone, two new): node_gain still copies rows, moved by key
    assert made(refreshed)["node_gain"] == "partial"
    full = build(dumps / "d2", dumps / "full-store", "f1")
    assert set(made(full).values()) == {"full"}
    for table in DETERMINISTIC_TABLES:
        assert rows(refreshed, table) == rows(full, table), table
    vectors = [np.load(b.path / "entity_vectors.npy") for b in (refreshed, full)]
    assert np.abs(vectors[0] - vectors[1]).max() < 1e-6


def facts(built) -> set[tuple[str, str, str]]:
    """The build's triples by entity and relation name."""
    names = built.read("entities", columns=["name"]).column("name").to_pylist()
    relations = dict(zip(*(built.read("relations").column(c).to_pylist() for c in ("id", "name"))))
    triples = built.read("triples").to_pydict()
    return {(names[s], relations[r], names[o])
            for s, r, o in zip(triples["s"], triples["r"], triples["o"])}


def test_a_document_replaced_by_a_new_version_keeps_only_the_new_versions_triples(tmp_path,
                                                                                 spark):
    """A person's article rewritten (born elsewhere, no teacher named): the refresh drops the
    old version's triples, sentences and sources, has the new one's, and equals a full build."""
    from lokg.testing.dumps import CITIES, PEOPLE, corpus, write_corpus

    docs, openie = corpus()
    write_corpus(tmp_path / "v1", docs, openie)
    person, old_city, new_city = PEOPLE[0], CITIES[0], CITIES[5]
    friend = PEOPLE[7]
    text = f"{person} is a sculptor. {person} was born in {new_city} in 1950."
    replaced = [{"title": person, "text": text} if d["title"] == person else d for d in docs]
    extracted = [{"title": person, "text": text, "extracted_entities": [person, new_city],
                  "extracted_triples": [[person, "born in", new_city]]}
                 if d["title"] == person else d for d in openie]
    write_corpus(tmp_path / "v2", replaced, extracted)
    config = load_config(None, ["triple_extract.backend=precomputed", *CONFIG[1:]])

    def build_docs(dump: str, store: str, build_id: str):
        return pipeline.build(str(tmp_path / dump), str(tmp_path / store), config,
                              build_id=build_id, log=lambda _: None)

    first = build_docs("v1", "store", "d1")
    refreshed = build_docs("v2", "store", "d2")
    full = build_docs("v2", "full-store", "f1")
    assert {(person, "born in", old_city), (person, "studied with", friend)} <= facts(first)
    assert (person, "born in", new_city) in facts(refreshed)
    assert not {(person, "born in", old_city), (person, "studied with", friend)} & facts(refreshed)
    assert refreshed.manifest["report"]["refresh"]["base"] == "d1"
    sentences = refreshed.read("sentences").column("text").to_pylist()
    assert not [s for s in sentences if "painter" in s and person in s]
    for table in (*DETERMINISTIC_TABLES, "documents", "sentences", "triple_sources"):
        assert rows(refreshed, table) == rows(full, table), table


def _edited_tsv(lines: list[str], seed: int) -> list[str]:
    """``lines`` (s, r, o tab-separated) with four removed and two added between entities
    and with relations that occur."""
    rng = np.random.default_rng(seed)
    rows = [line.split("\t") for line in lines]
    removed = set(rng.choice(len(lines), 4, replace=False).tolist())
    kept = [line for i, line in enumerate(lines) if i not in removed]
    added = set()
    while len(added) < 2:
        a, b, c = (rows[i] for i in rng.choice(len(rows), 3))
        line = "\t".join((a[0], b[1], c[2]))
        if line not in lines and a[0] != c[2]:
            added.add(line)
    return kept + sorted(added)


def test_a_small_refresh_asks_no_stage_for_a_spark_session(tmp_path, monkeypatch, spark):
    """A TSV dump (ingest's line store reads it) refreshed after a small edit: ingest,
    relation_stats, scos_merge's merge and path_cache run on the driver, entity_types,
    node_gain and scos_merge's rewrite on DuckDB (the engine a small dump resolves to): no
    stage asks for a Spark session."""
    from lokg.pipeline.synth import generate

    generate(tmp_path / "synth", n_triples=400, seed=3, n_questions=0)
    lines = (tmp_path / "synth" / "kg.tsv").read_text(encoding="utf-8").splitlines()
    for name, content in (("d1", lines), ("d2", _edited_tsv(lines, seed=1))):
        (tmp_path / name).mkdir()
        (tmp_path / name / "kg.tsv").write_text("\n".join(content) + "\n", encoding="utf-8")
    config = load_config(None, [c for c in CONFIG if not c.startswith("ingest.format")]
                         + ["ingest.format=tsv"])
    for name in ("d1", "d2"):
        if name == "d2":
            asked = spark_requests(monkeypatch)
        built = pipeline.build(str(tmp_path / name / "kg.tsv"), str(tmp_path / "store"), config,
                               build_id=name, log=lambda _: None)
    assert made(built)["ingest"] == "partial"
    assert asked == [], asked
