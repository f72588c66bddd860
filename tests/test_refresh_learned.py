"""The learned stages in a refresh (issue 18 item 2): transe and gat start from the previous
build's parameters, carried over by key — entity keys and relation names, not ids, which shift
when a key is added — and say in their report whether they started warm or cold and why.

Tiny tables, no Spark: a key-shifting edit (a new key that sorts first, a removed one, a new
relation) and a warm start at a learning rate too small to move anything, so each kept key's
vector must come back as the previous build's vector of that key. Then quality (slow, Spark):
a warm refresh of a synthetic dump with 1 % of its triples changed against a full build."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

torch = pytest.importorskip("torch")

from lokg.common.stage import PREVIOUS  # noqa: E402
from lokg.runtime.contract import TABLE_SCHEMAS, read_table, write_table  # noqa: E402
from lokg.training import gat, gat_model, transe  # noqa: E402
from lokg.training.warm_start import match_by_key  # noqa: E402

#: two relations that share their pairs and one more: enough graph for a few epochs
RELATIONS = ["film.director", "film.directed_by", "film.genre"]


def graph_tables(root: Path, keys: list[str], relations: list[str]) -> dict[str, str]:
    """entities, relations and triples (ids dense in key / name order, as ingest numbers
    them) of a graph given by keys: entity i → i+1 under every relation, a ring."""
    keys, relations = sorted(keys), sorted(relations)
    rows = [{"id": i, "key": k, "name": k.upper(), "aliases": [], "description": None,
             "types": [], "attributes": []} for i, k in enumerate(keys)]
    ring = [(i, r, (i + 1 + r) % len(keys)) for i in range(len(keys))
            for r in range(len(relations))]
    tables = {"entities": pa.Table.from_pylist(rows, schema=TABLE_SCHEMAS["entities"]),
              "relations": pa.table({"id": list(range(len(relations))), "name": relations}),
              "triples": pa.table(dict(zip("sro", map(list, zip(*ring)))))}
    for name, table in tables.items():
        write_table(name, table, root / f"{name}.parquet")
    return {name: str(root / f"{name}.parquet") for name in tables}


def transe_config(**overrides) -> dict:
    return {"transe": {"trainer": "sparse", "device": "cpu", "dim": 8, "batch_size": 16,
                       "epochs": 3, "min_steps": 0, "tolerance": 0.0, **overrides}}


def previous(paths: dict[str, str], run_dir: str, name: str) -> dict[str, str]:
    return {**{PREVIOUS + t: p for t, p in paths.items()}, PREVIOUS + name: run_dir}


KEYS = [f"m.{i:02d}" for i in range(1, 30)]
EDITED = ["m.00"] + KEYS[:10] + KEYS[11:]  # a key sorting first: every id shifts; m.11 removed


@pytest.fixture(scope="module")
def transe_runs(tmp_path_factory):
    """A full transe run on KEYS and a warm one on EDITED (one more relation) that moves
    nothing (learning rate 1e-12): the rows it ends with are the rows it started from."""
    root = tmp_path_factory.mktemp("transe-warm")
    before = graph_tables(root / "before", KEYS, RELATIONS)
    full = transe.run(transe_config(), before, str(root / "full"))
    after = graph_tables(root / "after", EDITED, RELATIONS + ["film.writer"])
    inputs = {**after, **previous(before, full["outputs"]["transe_run"], "transe_run")}
    warm = transe.run(transe_config(learning_rate=1e-12, refresh_epochs=2,
                                    refresh_loss_margin=None), inputs, str(root / "warm"))
    return root, full, warm


def vectors_by_key(root: Path, entities: str) -> dict[str, np.ndarray]:
    saved = torch.load(root / "transe" / "trained_model.pt", weights_only=True)
    keys = read_table(Path(entities), columns=["id", "key"]).to_pylist()
    return {row["key"]: saved["entity_embeddings"][row["id"]].numpy() for row in keys}


def test_transe_warm_starts_from_the_previous_vectors_by_key(transe_runs):
    root, _, warm = transe_runs
    before = vectors_by_key(root / "full", str(root / "before" / "entities.parquet"))
    after = vectors_by_key(root / "warm", str(root / "after" / "entities.parquet"))
    kept = sorted(set(before) & set(after))
    assert len(kept) == len(KEYS) - 1
    assert max(np.abs(before[k] - after[k]).max() for k in kept) < 1e-5
    assert warm["report"]["refresh"] == {
        "start": "warm", "why": "refresh: previous parameters carried over by key", "epochs": 2,
        "entities": {"kept": 28, "new": 1, "dropped": 1},
        "relations": {"kept": 3, "new": 1, "dropped": 0}}
    assert warm["report"]["epochs"] == 2


def test_transe_relations_are_carried_over_by_name(transe_runs):
    root, full, warm = transe_runs
    names = {run: read_table(root / run / "relations.parquet").column("name").to_pylist()
             for run in ("before", "after")}
    rows = {run: np.load(out["outputs"]["relation_embeddings"])
            for run, out in (("before", full), ("after", warm))}
    for name in RELATIONS:  # film.writer sorts between the others: their ids shift
        assert np.allclose(rows["before"][names["before"].index(name)],
                           rows["after"][names["after"].index(name)], atol=1e-5)


def test_a_full_transe_run_says_cold_and_why(transe_runs):
    _, full, _ = transe_runs
    assert full["report"]["refresh"]["start"] == "cold"
    assert "full build" in full["report"]["refresh"]["why"]


@pytest.mark.parametrize("case, why", [("refresh_epochs 0", "refresh_epochs is 0"),
                                       ("no parameters", "no sparse-trainer parameters")])
def test_transe_runs_cold_when_it_cannot_warm_start(transe_runs, tmp_path, case, why):
    import shutil

    root, full, _ = transe_runs
    run_dir = Path(full["outputs"]["transe_run"])
    if case == "no parameters":  # an old build's run directory, say
        run_dir = Path(shutil.copytree(run_dir, tmp_path / "old-run"))
        (run_dir / "trained_model.pt").unlink()
    before = {t: str(root / "before" / f"{t}.parquet") for t in ("entities", "relations",
                                                                  "triples")}
    after = {t: str(root / "after" / f"{t}.parquet") for t in before}
    overrides = {"refresh_epochs": 0} if case == "refresh_epochs 0" else {}
    got = transe.run(transe_config(**overrides), {**after, **previous(before, str(run_dir),
                                                                      "transe_run")},
                     str(tmp_path / "out"))
    assert got["report"]["refresh"]["start"] == "cold"
    assert why in got["report"]["refresh"]["why"]
    assert got["report"]["epochs"] == 3  # transe.epochs: a full run


def test_keys_are_matched_across_shifted_ids(tmp_path):
    before = graph_tables(tmp_path / "before", KEYS, RELATIONS)
    after = graph_tables(tmp_path / "after", EDITED, RELATIONS)
    match = match_by_key(after["entities"], before["entities"], "key", 29, 29)
    old = dict(enumerate(sorted(KEYS)))
    new = dict(enumerate(sorted(EDITED)))
    assert [new[i] for i in match.current] == [old[i] for i in match.previous]
    assert (match.new, match.dropped, len(match.current)) == (1, 1, 28)
    # ids without a parameter row (no triple) are left out on both sides
    short = match_by_key(after["entities"], before["entities"], "key", 5, 3)
    assert short.previous.max() < 3 and short.current.max() < 5 and short.dropped == 0


# ---------------------------------------------------------------------------------------------
# gat: the layers as they were, relation_diag rows by canonical relation name

GAT = {"gat": {"layers": 1, "heads": 2, "hidden": 4}}


def test_gat_warm_state_carries_relation_rows_by_name(tmp_path):
    from lokg.pipeline.config import section

    cfg = section(GAT, "gat")
    saved = gat_model.build_model(6, 3, 3, cfg).state_dict()
    saved["relation_diag"] = torch.arange(6.0).view(3, 2)
    (tmp_path / "run").mkdir()
    torch.save(saved, tmp_path / "run" / "model.pt")
    old = graph_tables(tmp_path / "old", KEYS, RELATIONS)["relations"]
    new = graph_tables(tmp_path / "new", KEYS, ["film.director", "film.genre", "film.writer"])
    fresh = gat_model.build_model(6, 3, 3, cfg).state_dict()
    inputs = {**new, PREVIOUS + "relations": old, PREVIOUS + "gat_run": str(tmp_path / "run")}
    state, entry = gat.warm_start_state(inputs, {**cfg, "refresh_epochs": 4}, fresh)
    # old ids: directed_by 0, director 1, genre 2; new: director 0, genre 1, writer 2
    assert state["relation_diag"].tolist() == [[2.0, 3.0], [4.0, 5.0], [1.0, 1.0]]
    assert all(torch.equal(state[k], saved[k]) for k in saved if k != "relation_diag")
    assert entry["start"] == "warm" and entry["epochs"] == 4
    assert entry["relations"] == {"kept": 2, "new": 1, "dropped": 1}
    capped = gat.warm_start_state(inputs, {**cfg, "refresh_epochs": 99, "epochs": 7}, fresh)
    assert capped[1]["epochs"] == 7  # never more than a full run
    wider = gat_model.build_model(8, 3, 3, cfg).state_dict()  # another encoder's width
    state, entry = gat.warm_start_state(inputs, {**cfg, "refresh_epochs": 4}, wider)
    assert state is None and entry["start"] == "cold" and "do not fit" in entry["why"]
    state, entry = gat.warm_start_state(new, {**cfg, "refresh_epochs": 4}, fresh)
    assert state is None and "full build" in entry["why"]


def test_refresh_epochs_are_checked_config():
    from lokg.pipeline.config import check_config
    from lokg.runtime.config import ConfigError

    for section_name in ("transe", "gat"):
        check_config({section_name: {"refresh_epochs": 0}})
        with pytest.raises(ConfigError, match=f"{section_name}.refresh_epochs"):
            check_config({section_name: {"refresh_epochs": -1}})
    with pytest.raises(ConfigError, match="gat.refresh_learning_rate"):
        check_config({"gat": {"refresh_learning_rate": 0}})


# ---------------------------------------------------------------------------------------------
# quality: a warm refresh against a full build of the same edited dump (Spark, every stage)

#: The tolerance the warm start is held to (docs/OPERATIONS.md): the same SCOS merge groups,
#: and the GAT's mean attention on the gold-path edges within this share of a full build's.
GOLD_ATTENTION_TOLERANCE = 0.10


def staged(store: Path, build_id: str, stage: str) -> dict:
    """A stage's record in a build stopped before publishing (``--until``)."""
    from lokg.pipeline.driver import STAGE_RECORD
    from lokg.runtime.contract import Store

    return json.loads((Store(store).staging_dir(build_id) / stage / STAGE_RECORD).read_text())


def merge_groups(store: Path, build_id: str) -> list[list[str]]:
    """The relations SCOS merged, as sorted groups of names (a published build's, or a
    stopped one's)."""
    from lokg.runtime.contract import Store

    if build_id in Store(store).build_ids():
        rows = Store(store).build(build_id).read("relation_map")
    else:
        rows = read_table(Path(staged(store, build_id, "scos_merge")["outputs"]["relation_map"]))
    groups: dict[str, list[str]] = {}
    for row in rows.to_pylist():
        groups.setdefault(row["canonical_name"], []).append(row["name"])
    return sorted(sorted(g) for g in groups.values() if len(g) > 1)


@pytest.fixture(scope="module")
def warm_and_full(tmp_path_factory, spark):
    """20k synthetic triples (planted synonyms, training questions) built and published; the
    dump with 1 % of its triples changed (100 removed, 100 added) refreshed into the same
    store and built in full into another, both up to gat."""
    from lokg.pipeline import driver as pipeline
    from lokg.pipeline.synth import generate
    from lokg.pipeline.config import load_config
    from lokg.pipeline.dump_edit import edit_synth_dump

    root = tmp_path_factory.mktemp("warm-quality")
    generate(root / "d1", n_triples=20_000, seed=7, n_questions=200)
    edit_synth_dump(root / "d1", root / "d2", remove_edges=100, add_edges=100, seed=5)
    config = load_config(None, ["ingest.format=synth", f"gat.questions={root}/d1/train.jsonl"])
    pipeline.build(str(root / "d1"), str(root / "store"), config, build_id="b1",
                   log=lambda _: None)
    for store, build_id in (("store", "warm"), ("full", "full")):
        pipeline.build(str(root / "d2"), str(root / store), config, build_id=build_id,
                       until="gat", log=lambda _: None)
    return root


@pytest.mark.slow
@pytest.mark.spark
def test_a_warm_refresh_keeps_the_merges_and_the_gold_attention_of_a_full_build(warm_and_full):
    root = warm_and_full
    records = {run: {s: staged(root / store, run, s) for s in ("transe", "gat")}
               for store, run in (("store", "warm"), ("full", "full"))}
    for stage in ("transe", "gat"):
        assert records["warm"][stage]["refresh"] == "partial"
        assert records["warm"][stage]["report"]["refresh"]["start"] == "warm"
        assert records["full"][stage]["report"]["refresh"]["start"] == "cold"
    assert merge_groups(root / "store", "warm") == merge_groups(root / "full", "full") != []
    # SCOS's cosine term kept the previous build's vectors (the warm ones moved within
    # tolerance), so the refresh merged as the previous build did
    scos = staged(root / "store", "warm", "scos_merge")
    assert scos["refresh"] == "partial" and scos["report"]["refresh"]["vectors"] == "previous build's"
    assert merge_groups(root / "store", "warm") == merge_groups(root / "store", "b1")
    gold = {run: records[run]["gat"]["report"]["gold_attention"]["after"] for run in records}
    assert abs(gold["warm"] - gold["full"]) <= GOLD_ATTENTION_TOLERANCE * gold["full"]
    assert gold["warm"] > 2 * records["warm"]["gat"]["report"]["gold_attention_uniform"]


@pytest.mark.parametrize("margin, trains", [(None, True), (0.002, False), (0.0, True)])
def test_transe_refresh_keeps_the_previous_vectors_while_their_loss_holds(tmp_path, margin,
                                                                          trains):
    """Same graph, previous vectors: their eval loss here is the previous run's final one,
    0.001 above the reference planted in its losses.json (an earlier trained build's, as in a
    chain of refreshes). A margin that covers it trains no epoch — the vectors are the previous
    ones and the reference is passed on —; no margin, or one that does not, trains
    refresh_epochs and makes this run's final loss the reference."""
    tables = graph_tables(tmp_path / "graph", KEYS, RELATIONS)
    first = transe.run(transe_config(), tables, str(tmp_path / "first"))
    losses_file = Path(first["outputs"]["transe_run"]) / "losses.json"
    losses = json.loads(losses_file.read_text())
    assert losses["eval"]["reference"] == losses["eval"]["after"] is not None  # it trained
    planted = losses["eval"]["after"] - 0.001
    losses["eval"]["reference"] = planted
    losses_file.write_text(json.dumps(losses))
    second = transe.run(transe_config(refresh_epochs=2, refresh_loss_margin=margin),
                        {**tables, **previous(tables, first["outputs"]["transe_run"],
                                              "transe_run")}, str(tmp_path / "second"))
    refresh = second["report"]["refresh"]
    assert second["report"]["epochs"] == (2 if trains else 0) == refresh["epochs"]
    assert ("stopped" in refresh) is (not trains)
    if not trains:
        assert refresh["stopped"]["at_most"] == pytest.approx(planted + margin, abs=1e-6)
    rows = [np.load(r["outputs"]["relation_embeddings"]) for r in (first, second)]
    assert np.array_equal(rows[0], rows[1]) is (not trains)
    again = json.loads((Path(second["outputs"]["transe_run"]) / "losses.json").read_text())
    assert again["eval"]["reference"] == (again["eval"]["after"] if trains else planted)
    assert (again["eval"]["after"] == again["eval"]["before"]) is (not trains)


def test_transe_refresh_loss_margin_is_checked_config():
    from lokg.pipeline.config import check_config
    from lokg.runtime.config import ConfigError

    check_config({"transe": {"refresh_loss_margin": None}})
    with pytest.raises(ConfigError, match="transe.refresh_loss_margin"):
        check_config({"transe": {"refresh_loss_margin": -0.1}})
