"""Stage gat (training/gat.py): relation-aware GAT with PyG, attention over out-edges.

Toy graphs built by hand and a small synthetic KG (pipeline/synth.py, parsed from its kg.tsv
without Spark), random node and relation vectors, narrow layers: CPU, seconds.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torch_geometric")

from lokg.pipeline import synth  # noqa: E402
from lokg.pipeline.config import DEFAULTS  # noqa: E402
from lokg.runtime.contract import read_table, write_table  # noqa: E402
from lokg.common.stage import StageError  # noqa: E402
from lokg.training import (gat, gat_gold, gat_inputs, gat_model, gat_rows,  # noqa: E402
                           gat_sampler, gat_train)

DEVICES = [
    "cpu",
    pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(),
                                                  reason="no CUDA device")),
]
NODE_DIM, REL_DIM = 16, 8
ATTRIBUTE = pa.list_(pa.struct([("key", pa.string()), ("value", pa.string())]))


def write_inputs(root: Path, triples, keys: list[str], relation_names: list[str],
                 seed: int = 0) -> dict[str, str]:
    """Every table gat reads, with random unit node vectors and random TransE vectors;
    relation_map is the identity (R* = R0)."""
    rng = np.random.default_rng(seed)
    root.mkdir(parents=True, exist_ok=True)
    n, r = len(keys), len(relation_names)
    tri = np.asarray(triples, dtype=np.int64).reshape(-1, 3)
    paths = {name: root / f"{name}.parquet" for name in
             ("entities", "relations", "triples", "relation_map", "entity_ids")}
    write_table("entities", pa.table({
        "id": np.arange(n), "key": keys, "name": keys, "aliases": [[] for _ in keys],
        "description": [None] * n, "types": [[] for _ in keys],
        "attributes": pa.array([[] for _ in keys], ATTRIBUTE)}), paths["entities"])
    write_table("relations", pa.table({"id": np.arange(r), "name": relation_names}),
                paths["relations"])
    write_table("triples", pa.table({"s": tri[:, 0], "r": tri[:, 1], "o": tri[:, 2]}),
                paths["triples"])
    write_table("relation_map", pa.table({"id": np.arange(r), "name": relation_names,
                                          "canonical_id": np.arange(r),
                                          "canonical_name": relation_names}),
                paths["relation_map"])
    rows = rng.permutation(n)  # vectors stored in a row order that is not the id order
    vectors = rng.normal(size=(n, NODE_DIM)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    np.save(root / "entity_vectors.npy", vectors[rows])
    write_table("entity_ids", pa.table({"row": np.arange(n), "id": rows}), paths["entity_ids"])
    np.save(root / "relation_embeddings.npy", rng.normal(size=(r, REL_DIM)).astype(np.float32))
    inputs = {k: str(p) for k, p in paths.items()}
    inputs["entity_vectors"] = str(root / "entity_vectors.npy")
    inputs["relation_embeddings"] = str(root / "relation_embeddings.npy")
    return inputs


@pytest.fixture(scope="module")
def synth_kg(tmp_path_factory):
    """A 1,500-triple synthetic KG with its questions (topic mids, relation paths, answers)."""
    root = tmp_path_factory.mktemp("synth")
    synth.generate(root / "dump", n_triples=1500, seed=3, n_questions=200)
    rows = [line.split("\t") for line in (root / "dump" / "kg.tsv").read_text().splitlines()]
    keys = sorted({r[0] for r in rows} | {r[2] for r in rows})
    names = sorted({r[1] for r in rows})
    kid, rid = {k: i for i, k in enumerate(keys)}, {n: i for i, n in enumerate(names)}
    triples = sorted({(kid[s], rid[r], kid[o]) for s, r, o in rows})
    inputs = write_inputs(root / "in", triples, keys, names)
    return inputs, root / "dump" / "questions.jsonl", len(triples)


def config(**overrides) -> dict:
    cfg = {"gat": {**DEFAULTS["gat"], "hidden": 16, "heads": 4, "epochs": 3,
                   "learning_rate": 0.01, "device": "cpu"}}
    cfg["gat"].update(overrides)
    return cfg


def run_stage(tmp_path: Path, inputs: dict, **overrides) -> tuple[dict, Path]:
    out = tmp_path / "out"
    out.mkdir(parents=True, exist_ok=True)
    return gat.run(config(**overrides), inputs, str(out)), out


def assert_out_distributions(edges: pa.Table) -> None:
    s = edges.column("s").to_numpy()
    att = edges.column("attention").to_numpy()
    sums = np.bincount(s, weights=att)
    np.testing.assert_allclose(sums[np.unique(s)], 1.0, atol=1e-5)
    assert (att > 0).all()


# --------------------------------------------------------------------------------------------
# the layer


def toy_model(seed: int = 0, **overrides):
    torch.manual_seed(seed)
    cfg = {**DEFAULTS["gat"], "hidden": 8, "heads": 2, **overrides}
    return gat_model.build_model(NODE_DIM, REL_DIM, 3, cfg).eval()


TOY_TRIPLES = np.array([[0, 0, 1], [0, 1, 2], [0, 2, 3], [1, 0, 2], [2, 1, 3], [3, 2, 4],
                        [4, 0, 0], [1, 2, 1]])  # includes a self-loop (1, 2, 1)


def toy_tensors(seed: int = 0):
    graph = gat_inputs.Graph.from_triples(TOY_TRIPLES, 5)
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(5, NODE_DIM, generator=gen)
    rel_vec = torch.randn(3, REL_DIM, generator=gen)
    index = torch.stack([torch.from_numpy(graph.dst), torch.from_numpy(graph.src)])
    return graph, x, rel_vec, index


def toy_types(graph):
    return gat_model.edge_types(torch.from_numpy(graph.rel), torch.from_numpy(graph.inverse), 3)


def by_hand(conv, x, graph, alpha, concat: bool):
    """A GAT layer's output from its attention and W h_v alone (+ residual and bias):
    out_u = Σ_{u→v} α(u→v) · W h_v. Any relation term in the messages breaks the equality."""
    heads, channels = conv.heads, conv.out_channels
    wx = conv.lin(x).view(-1, heads, channels)
    out = torch.zeros(x.shape[0], heads, channels)
    for e in range(graph.num_edges):
        out[graph.src[e]] += alpha[e].unsqueeze(-1) * wx[graph.dst[e]]
    out = out.reshape(x.shape[0], -1) if concat else out.mean(1)
    return out + conv.res(x) + conv.bias


def test_relation_vectors_enter_attention_but_not_messages():
    model = toy_model()
    graph, x, rel_vec, index = toy_tensors()
    other = torch.randn(3, REL_DIM, generator=torch.Generator().manual_seed(7))
    with torch.no_grad():
        h = x
        for layer, conv in enumerate(model.convs):
            concat = layer < len(model.convs) - 1
            outs = []
            for vectors in (rel_vec, other):
                out, alpha = model.layer(layer, h, index, toy_types(graph),
                                         gat_model.relation_table(vectors))
                pre = torch.nn.functional.elu if concat else (lambda t: t)
                torch.testing.assert_close(out, pre(by_hand(conv, h, graph, alpha, concat)),
                                           atol=1e-5, rtol=1e-5)
                outs.append((out, alpha))
            # other relation vectors: other attention, hence other outputs
            assert (outs[0][1] - outs[1][1]).abs().max() > 1e-3
            assert (outs[0][0] - outs[1][0]).abs().max() > 1e-4
            h = outs[0][0]


def test_inverse_edges_carry_the_negated_relation_vector():
    graph, _, rel_vec, _ = toy_tensors()
    feats = gat_model.relation_table(rel_vec)[toy_types(graph)]
    for e in range(graph.num_edges):
        sign = -1.0 if graph.inverse[e] else 1.0
        torch.testing.assert_close(feats[e], sign * rel_vec[graph.rel[e]])
    assert graph.num_edges == 2 * len(TOY_TRIPLES)


@pytest.mark.parametrize("device", DEVICES)
def test_layer_equals_pyg_gatconv_fed_every_edges_relation_vector(device):
    """The per-relation edge term is GATConv's per-edge one: same parameters, same α and
    outputs as the library layer given each edge's ±e_r — in training mode too (gradients)."""
    from torch_geometric.nn import GATConv

    model = toy_model(layers=2).to(device).train()
    graph, x, rel_vec, index = toy_tensors()
    x, rel_vec, index = x.to(device), rel_vec.to(device), index.to(device)
    types, table = toy_types(graph).to(device), gat_model.relation_table(rel_vec)
    for layer, conv in enumerate(model.convs):
        library = GATConv(conv.in_channels, conv.out_channels, heads=conv.heads,
                          concat=conv.concat, add_self_loops=False, edge_dim=REL_DIM,
                          residual=True).to(device)
        library.load_state_dict(conv.state_dict())
        out, alpha = conv(x, index, types, table)
        want, (_, want_alpha) = library(x, index, table[types], return_attention_weights=True)
        torch.testing.assert_close(alpha, want_alpha, atol=1e-6, rtol=1e-5)
        torch.testing.assert_close(out, want, atol=1e-5, rtol=1e-5)
        grads = torch.autograd.grad(out.square().sum(), list(conv.parameters()))
        want_grads = torch.autograd.grad(want.square().sum(), list(library.parameters()))
        for got, expected in zip(grads, want_grads):
            torch.testing.assert_close(got, expected, atol=1e-4, rtol=1e-4)
        x = out.detach()


@pytest.mark.parametrize("device", DEVICES)
def test_forward_attention_is_a_distribution_over_out_edges(device):
    model = toy_model().to(device)
    graph, x, rel_vec, index = toy_tensors()
    with torch.no_grad():
        z, alpha = model(x.to(device), index.to(device), toy_types(graph).to(device),
                         gat_model.relation_table(rel_vec.to(device)))
    assert z.shape == (5, model.out_dim) and alpha.shape == (graph.num_edges, 2)
    assert z.device.type == device
    sums = torch.zeros(5, 2, device=device).index_add_(0, torch.from_numpy(graph.src).to(device),
                                                       alpha)
    torch.testing.assert_close(sums, torch.ones(5, 2, device=device), atol=1e-5, rtol=0)


def test_chunked_inference_equals_the_full_forward(tmp_path):
    model = toy_model(layers=3)
    graph, x, rel_vec, index = toy_tensors()
    with torch.no_grad():
        z, alpha = model(x, index, toy_types(graph), gat_model.relation_table(rel_vec))
    for chunk in (1, 3, 1000):
        z2, alpha2 = gat_model.infer(model, graph, x, rel_vec, torch.device("cpu"), chunk,
                                     tmp_path / str(chunk))
        torch.testing.assert_close(torch.from_numpy(np.asarray(z2)), z, atol=1e-5, rtol=1e-5)
        np.testing.assert_allclose(np.asarray(alpha2), alpha.mean(1).numpy(), atol=1e-6)
    assert gat_inputs.node_chunks(graph.indptr, 3)[0] == (0, 1)  # node 0 has 4 out-edges: alone


# --------------------------------------------------------------------------------------------
# the stage


def test_stage_exports_normalised_attention_for_every_edge(tmp_path, synth_kg):
    inputs, _, n_triples = synth_kg
    result, out = run_stage(tmp_path, inputs)
    edges = read_table(Path(result["outputs"]["edges"]), "edges")
    assert edges.num_rows == 2 * n_triples
    assert pc.sum(edges.column("inverse")).as_py() == n_triples
    assert_out_distributions(edges)
    triples = read_table(Path(inputs["triples"]), "triples")
    fwd = edges.filter(pc.invert(edges.column("inverse")))
    got = sorted(zip(*(fwd.column(c).to_pylist() for c in ("s", "r", "o"))))
    assert got == sorted(zip(*(triples.column(c).to_pylist() for c in ("s", "r", "o"))))
    run_dir = Path(result["outputs"]["gat_run"])
    cfg = json.loads((run_dir / "config.json").read_text())
    assert cfg["seed"] == 0 and cfg["device"] == "cpu" and cfg["mode"] == "full"
    losses = json.loads((run_dir / "losses.json").read_text())
    assert len(losses["link"]) == 3 and losses["path"] == [None] * 3
    state = torch.load(run_dir / "model.pt")
    assert any(k.endswith("lin_edge.weight") for k in state)
    assert result["report"]["device"] == "cpu"


def test_a_small_memory_budget_exports_the_same_attention_in_more_blocks(tmp_path, synth_kg,
                                                                         monkeypatch):
    inputs, _, _ = synth_kg
    runs = []
    monkeypatch.setattr(gat_model, "BLOCK_SHARE", 1e-5)  # 0.25 GB: blocks of ~40 edges
    for memory_gb in (1000.0, 0.25):
        out = tmp_path / str(memory_gb)
        out.mkdir()
        cfg = {**config(epochs=2), "build": {"memory_gb": memory_gb}}
        result = gat.run(cfg, inputs, str(out))
        runs.append(read_table(Path(result["outputs"]["edges"]), "edges"))
        assert not (out / ".gat-scratch").exists()  # the on-disk α and layer rows are removed
    assert gat_model.block_edges(config()["gat"], NODE_DIM, 0.25) < 100
    monkeypatch.undo()
    assert gat_model.block_edges(config()["gat"], NODE_DIM, 1000.0) == DEFAULTS["gat"][
        "batch_triples"]
    assert runs[0].drop(["attention"]).equals(runs[1].drop(["attention"]))
    # the same α: a block holds whole out-neighbourhoods; only float32 rounding of the layer's
    # matrix products over fewer rows differs
    np.testing.assert_allclose(runs[1].column("attention").to_numpy(),
                               runs[0].column("attention").to_numpy(), rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("group", [1, 2, 2048])
def test_disk_rows_write_read_and_take(tmp_path, monkeypatch, group):
    monkeypatch.setattr(gat_rows, "GATHER_ROWS", group)  # rows gathered under one mapping
    rows = gat_rows.DiskRows(tmp_path / "r.f32", 5, 3, np.float32)
    data = np.arange(15, dtype=np.float32).reshape(5, 3)
    rows.write(0, data[:2])
    rows.write(2, data[2:])
    np.testing.assert_array_equal(rows.read(1, 4), data[1:4])
    np.testing.assert_array_equal(rows.take(np.array([4, 0, 4])), data[[4, 0, 4]])
    np.testing.assert_array_equal(np.asarray(rows), data)
    alpha = gat_rows.DiskRows(tmp_path / "a.f64", 3, None, np.float64)
    alpha.write(1, np.array([0.5, 0.25]))
    np.testing.assert_array_equal(alpha[np.array([2, 1])], [0.25, 0.5])
    assert gat_rows.DiskRows(tmp_path / "e", 0, 2, np.float32).take(np.array([], int)).shape == (
        0, 2)


def test_training_lowers_the_link_prediction_loss(tmp_path, synth_kg):
    inputs, _, _ = synth_kg
    result, _ = run_stage(tmp_path, inputs, epochs=2, dropout=0.0)
    report = result["report"]
    assert report["eval_link_loss"]["after"] < report["eval_link_loss"]["before"]
    assert report["link_loss"]["last"] < report["link_loss"]["first"]


@pytest.mark.parametrize("margin, trains", [(None, True), (0.002, False), (0.0, True)])
def test_refresh_keeps_the_previous_model_while_its_loss_holds(tmp_path, synth_kg, margin,
                                                                trains):
    """Same graph, previous parameters: their eval loss here equals the previous run's final
    one, 0.001 above the reference planted in its losses.json (an earlier trained build's, as
    in a chain of refreshes). A margin that covers it skips the epochs — α is the previous
    model's forward pass, the previous α exactly, and the reference is passed on —; no margin,
    or one that does not, trains refresh_epochs and makes this run's loss the reference."""
    from lokg.common.stage import PREVIOUS

    inputs, _, _ = synth_kg
    first, _ = run_stage(tmp_path / "first", inputs, epochs=2, dropout=0.0)
    losses_file = Path(first["outputs"]["gat_run"]) / "losses.json"
    losses = json.loads(losses_file.read_text())
    assert losses["eval_link"]["after"] == pytest.approx(first["report"]["eval_link_loss"]["after"],
                                                         abs=1e-6)
    assert losses["eval_link"]["reference"] == losses["eval_link"]["after"]  # it trained
    planted = losses["eval_link"]["after"] - 0.001
    losses["eval_link"]["reference"] = planted
    losses_file.write_text(json.dumps(losses))
    previous = {**{PREVIOUS + k: inputs[k] for k in ("relations",)},
                PREVIOUS + "gat_run": first["outputs"]["gat_run"]}
    second, _ = run_stage(tmp_path / "second", {**inputs, **previous}, epochs=2, dropout=0.0,
                          refresh_epochs=2, refresh_loss_margin=margin)
    refresh = second["report"]["refresh"]
    assert refresh["start"] == "warm"
    assert second["report"]["epochs"] == (2 if trains else 0) == refresh["epochs"]
    assert ("stopped" in refresh) is (not trains)
    alpha = [read_table(Path(r["outputs"]["edges"]), "edges").column("attention").to_numpy()
             for r in (first, second)]
    assert np.array_equal(alpha[0], alpha[1]) is (not trains)
    second_losses = json.loads((Path(second["outputs"]["gat_run"]) / "losses.json").read_text())
    assert second_losses["eval_link"]["reference"] == (
        second_losses["eval_link"]["after"] if trains else planted)


def test_refresh_loss_margin_is_checked_config():
    from lokg.pipeline.config import check_config
    from lokg.runtime.config import ConfigError

    check_config({"gat": {"refresh_loss_margin": None}})
    with pytest.raises(ConfigError, match="gat.refresh_loss_margin"):
        check_config({"gat": {"refresh_loss_margin": -0.1}})


def test_sampled_subgraph_training(tmp_path, synth_kg):
    inputs, questions, _ = synth_kg
    result, _ = run_stage(tmp_path, inputs, epochs=2, max_full_batch_edges=100,
                          batch_triples=400, questions=str(questions))
    report = result["report"]
    assert report["mode"] == "sampled"
    assert report["eval_link_loss"]["after"] < report["eval_link_loss"]["before"]
    assert report["gold_attention"]["after"] > report["gold_attention"]["before"]
    assert_out_distributions(read_table(Path(result["outputs"]["edges"]), "edges"))


def random_graph(seed: int = 0, nodes: int = 60, triples: int = 400,
                 block_edges: int | None = None) -> gat_inputs.Graph:
    """Random triples with a hub (node 0 is the tail of a quarter of them)."""
    rng = np.random.default_rng(seed)
    tri = np.stack([rng.integers(0, nodes, triples), rng.integers(0, 3, triples),
                    rng.integers(0, nodes, triples)], 1)
    tri[: triples // 4, 2] = 0
    return gat_inputs.Graph.from_triples(np.unique(tri, axis=0), nodes, block_edges)


@pytest.mark.parametrize("fanout,hops", [(1, 1), (3, 2), (5, 3), (1000, 2)])
def test_sampled_subgraph_holds_the_seeds_and_at_most_fanout_edges_per_node(fanout, hops):
    graph = random_graph()
    sampler = gat_sampler.NeighbourSampler(graph, fanout, torch.Generator().manual_seed(1))
    sampler.shuffle()
    seeds = torch.tensor([0, 7, 9, 30])
    must = torch.from_numpy(np.flatnonzero(graph.src == 7)[:fanout + 2])  # more than fanout
    sub = sampler.sample(seeds, hops, must=must)
    nodes, edges = sub.nodes.numpy(), sub.edges.numpy()
    assert (nodes[:len(seeds)] == seeds.numpy()).all() and len(np.unique(nodes)) == len(nodes)
    assert len(np.unique(edges)) == len(edges) and set(must.tolist()) <= set(edges.tolist())
    # the reversed local index names each edge's own endpoints
    assert (nodes[sub.index[1].numpy()] == graph.src[edges]).all()
    assert (nodes[sub.index[0].numpy()] == graph.dst[edges]).all()
    degree = graph.out_degree()
    for hop in range(hops):
        first = sub.edges_within[hop - 1] if hop else 0
        hop_edges = edges[first:sub.edges_within[hop]]
        expanded = nodes[(sub.within[hop - 1] if hop else 0):sub.within[hop]]
        assert set(graph.src[hop_edges]) <= set(expanded)  # edges leave this hop's nodes
        per_node = np.bincount(graph.src[hop_edges], minlength=graph.num_nodes)[expanded]
        extra = np.bincount(graph.src[must.numpy()], minlength=graph.num_nodes)[expanded]
        assert (per_node <= np.minimum(degree[expanded], fanout) + (extra if hop == 0 else 0)
                ).all()
        if fanout >= degree.max():  # no node to cut: every out-edge of every expanded node
            assert (per_node == degree[expanded]).all()
        # the next hop's new nodes are this hop's edges' far ends
        assert set(nodes[sub.within[hop]:sub.within[hop + 1]]) <= set(graph.dst[hop_edges])
    assert len(sub.within) == hops + 1 and sub.within[-1] == len(nodes)
    assert (sampler.local == -1).all()  # the buffer is left clean for the next step


def test_shuffle_orders_each_nodes_out_edges_by_their_random_keys(monkeypatch):
    graph = random_graph()
    orders = []
    for block in (1, 7, 1 << 22):  # a block of whole slices at a time: the same order
        monkeypatch.setattr(gat_sampler, "SHUFFLE_BLOCK", block)
        sampler = gat_sampler.NeighbourSampler(graph, 4, torch.Generator().manual_seed(3))
        sampler.shuffle()
        orders.append(sampler.order.numpy().copy())
    np.testing.assert_array_equal(orders[0], orders[1])
    np.testing.assert_array_equal(orders[0], orders[2])
    salt = int(torch.randint(0, 2**62, (1,), generator=torch.Generator().manual_seed(3)))
    keys = gat_sampler.edge_keys(salt, 0, graph.num_edges)
    for u in range(graph.num_nodes):  # each node's slice: its own edges, by their keys
        mine = orders[0][graph.indptr[u]:graph.indptr[u + 1]]
        np.testing.assert_array_equal(np.sort(mine), np.arange(graph.indptr[u], graph.indptr[u + 1]))
        assert (np.diff(keys[mine]) >= 0).all()
    assert (keys[5:9] == gat_sampler.edge_keys(salt, 5, 9)).all()  # a block's keys alone


@pytest.mark.parametrize("budget", [0, 20, 60, 150, 10**9])
def test_a_sample_past_its_budget_is_refused_before_it_is_built(budget):
    graph = random_graph()
    seeds = torch.tensor([0, 7, 9, 30])
    made = []

    def sample(fits):
        sampler = gat_sampler.NeighbourSampler(graph, 3, torch.Generator().manual_seed(1))
        sampler.shuffle()
        built = sampler.out_edges
        sampler.out_edges = lambda nodes: made.append(built(nodes)) or made[-1]
        return sampler.sample(seeds, 2, fits=fits), sampler

    whole, _ = sample(None)
    made.clear()
    sub, sampler = sample(lambda nodes, edges: nodes + edges <= budget)
    size = whole.within[-1] + whole.edges_within[-1]
    if size <= budget:  # fits: the same sample as without a bound
        assert torch.equal(sub.edges, whole.edges) and torch.equal(sub.nodes, whole.nodes)
    else:  # refused, and no hop built past the bound
        assert sub is None
        assert sum(len(m) for m in made) <= max(budget - len(seeds), 0)
    assert (sampler.local == -1).all()


@pytest.mark.parametrize("block_edges", [1, 7, 100, None])
def test_graph_built_in_blocks_equals_the_whole_build(block_edges):
    whole, blocks = random_graph(), random_graph(block_edges=block_edges)
    for name in ("src", "rel", "dst", "inverse", "indptr"):
        np.testing.assert_array_equal(getattr(blocks, name), getattr(whole, name))
        assert getattr(blocks, name).dtype == getattr(whole, name).dtype


def test_sampling_is_uniform_over_a_hubs_out_edges():
    graph = random_graph()
    hub_edges = np.flatnonzero(graph.src == 0)
    sampler = gat_sampler.NeighbourSampler(graph, 4, torch.Generator().manual_seed(0))
    counts = np.zeros(graph.num_edges)
    for _ in range(400):
        sampler.shuffle()
        counts[sampler.out_edges(torch.tensor([0])).numpy()] += 1
    share = counts[hub_edges] / 400
    np.testing.assert_allclose(share, 4 / len(hub_edges), atol=0.1)


def test_sampled_training_is_deterministic_for_a_seed():
    graph = random_graph()
    rng = np.random.default_rng(0)
    x = rng.standard_normal((graph.num_nodes, NODE_DIM)).astype(np.float32)
    rel = rng.standard_normal((3, REL_DIM)).astype(np.float32)
    cfg = {**config(max_full_batch_edges=10, batch_triples=50, fanout=3)["gat"]}
    runs = [gat.train(graph, x, rel, np.array([0, 3]), {**cfg, "seed": seed}, log=lambda m: None)
            for seed in (5, 5, 6)]
    assert runs[0].mode == "sampled"
    assert runs[0].link == runs[1].link and runs[0].path == runs[1].path
    np.testing.assert_array_equal(runs[0].attention, runs[1].attention)
    assert runs[0].link != runs[2].link


def test_a_sampled_step_past_its_memory_share_runs_in_halves(monkeypatch):
    graph = random_graph()
    rng = np.random.default_rng(0)
    x = rng.standard_normal((graph.num_nodes, NODE_DIM)).astype(np.float32)
    rel = rng.standard_normal((3, REL_DIM)).astype(np.float32)
    cfg = config(max_full_batch_edges=10, batch_triples=50, fanout=3)["gat"]
    gold = np.flatnonzero(~graph.inverse)[:4]
    runs = [gat.train(graph, x, rel, gold, cfg, log=lambda m: None, memory_gb=gb)
            for gb in (None, 1000.0)]
    assert runs[0].link == runs[1].link  # a step within its share: as without a budget
    monkeypatch.setattr(gat_train, "STEP_SHARE", 1e-12)  # every subgraph past it
    sizes, backward = [], gat_train._Epochs._backward
    monkeypatch.setattr(gat_train._Epochs, "_backward", lambda self, batch, *rest: (
        sizes.append(len(batch)), backward(self, batch, *rest))[1])
    split = gat.train(graph, x, rel, gold, cfg, log=lambda m: None, memory_gb=0.25)
    full_cfg = {**cfg, "max_full_batch_edges": 10**6}  # the graph fits, the budget does not
    assert gat.train(graph, x, rel, gold, full_cfg, log=lambda m: None).mode == "full"
    assert gat.train(graph, x, rel, gold, full_cfg, log=lambda m: None,
                     memory_gb=0.25).mode == "sampled"
    assert max(sizes) == 50 and min(sizes) == 1  # halved down to one triple a subgraph
    assert np.isfinite(split.link).all() and split.link != runs[0].link
    assert all(p is not None and np.isfinite(p) for p in split.path)


@pytest.mark.parametrize("sampled_steps", [None, 1, 3, 1000])
def test_sampled_steps_bound_an_epoch_and_a_pass_trains_each_triple_once(sampled_steps):
    graph = random_graph()
    cfg = config(max_full_batch_edges=10, batch_triples=50, sampled_steps=sampled_steps)["gat"]
    x = torch.zeros((graph.num_nodes, NODE_DIM))
    epochs = gat_train._Epochs(gat_model.build_model(NODE_DIM, REL_DIM, 3, cfg), graph, x,
                         torch.zeros((3, REL_DIM)), np.zeros(0, np.int64), cfg, torch.device("cpu"))
    batches = []
    epochs._subgraph_step = lambda batch, gold: (batches.append(batch.numpy()), (0.0, 0.0))[1]
    forward = np.flatnonzero(~graph.inverse)
    pass_steps = -(-len(forward) // 50)
    for _ in range(pass_steps):  # enough epochs for a whole pass, whatever the epoch's steps
        assert epochs._sampled_epoch()[2] == min(sampled_steps or pass_steps, pass_steps)
    first_pass = np.concatenate(batches[:pass_steps])
    np.testing.assert_array_equal(np.sort(first_pass), forward)


def test_path_term_raises_gold_path_attention(tmp_path, synth_kg):
    inputs, questions, _ = synth_kg
    with_path, _ = run_stage(tmp_path / "a", inputs, epochs=8, learning_rate=0.03,
                             questions=str(questions))
    without, _ = run_stage(tmp_path / "b", inputs, epochs=8, learning_rate=0.03,
                           questions=str(questions), path_weight=0.0)
    q = with_path["report"]["questions"]
    assert q["gold_edges"] > 0 and q["unknown_key_or_relation"] == 0 and q["no_walk"] == 0
    gold, base = with_path["report"]["gold_attention"], without["report"]["gold_attention"]
    assert gold["before"] == base["before"]  # same seed, same untrained model
    assert gold["after"] > gold["before"] + 0.03
    assert gold["after"] > base["after"] + 0.03
    assert with_path["report"]["path_loss"]["last"] < with_path["report"]["path_loss"]["first"]
    assert without["report"]["path_loss"] == {}


def test_uniform_ablation_is_one_over_out_degree(tmp_path, synth_kg):
    inputs, _, n_triples = synth_kg
    result, out = run_stage(tmp_path, {k: inputs[k] for k in ("triples", "relations")},
                            uniform=True)
    edges = read_table(Path(result["outputs"]["edges"]), "edges")
    s = edges.column("s").to_numpy()
    degree = np.bincount(s)
    np.testing.assert_allclose(edges.column("attention").to_numpy(), 1.0 / degree[s])
    assert edges.num_rows == 2 * n_triples
    assert not (Path(result["outputs"]["gat_run"]) / "model.pt").exists()


# --------------------------------------------------------------------------------------------
# gold paths


PQ_TRIPLES = [(0, 0, 1), (1, 1, 2), (1, 1, 3), (0, 0, 4), (4, 1, 2), (2, 0, 0)]
PQ_KEYS = ["ann", "bob", "cat", "dan", "eve"]
PQ_RELATIONS = ["parents", "gender"]


def edge_id(graph, s, r, o, inverse=False) -> int:
    hit = np.flatnonzero((graph.src == s) & (graph.rel == r) & (graph.dst == o)
                         & (graph.inverse == inverse))
    assert len(hit) == 1
    return int(hit[0])


def test_gold_edges_from_pathquestion_and_jsonl(tmp_path):
    inputs = write_inputs(tmp_path / "in", PQ_TRIPLES, PQ_KEYS, PQ_RELATIONS)
    graph = gat_inputs.Graph.from_triples(np.array(PQ_TRIPLES), 5)
    pq = tmp_path / "train.txt"
    pq.write_text(
        "who ? \tcat(cat/)\tann#parents#bob#gender#cat#<end>#cat\n"
        "who again ?\tcat(cat/)\tann#parents#bob#gender#cat#<end>#cat\n"  # paraphrase
        "who ?\tx(x/)\tann#parents#zed#gender#cat#<end>#cat\n"  # unknown entity
        "who ?\tann(ann/)\tbob#gender#ann#<end>#ann\n")  # no such edge
    raw = gat_gold.parse_questions(pq)
    assert raw.lines == 4 and len(raw.paths) == 3
    paths, unknown = gat_gold.resolve_paths(raw, inputs["entities"], inputs["relation_map"])
    assert unknown == 1
    ids, missed = gat_gold.gold_edges(paths, graph)
    assert missed == 1
    assert ids.tolist() == sorted([edge_id(graph, 0, 0, 1), edge_id(graph, 1, 1, 2)])

    # JSONL: topic + relations (+ answers) — every walk ending in an answer, both branches
    jl = tmp_path / "questions.jsonl"
    jl.write_text(json.dumps({"topic_entities": ["ann"], "path": PQ_RELATIONS,
                              "answer_keys": ["cat"]}) + "\n")
    paths, _ = gat_gold.resolve_paths(gat_gold.parse_questions(jl), inputs["entities"],
                                 inputs["relation_map"])
    ids, _ = gat_gold.gold_edges(paths, graph)
    assert ids.tolist() == sorted([edge_id(graph, 0, 0, 1), edge_id(graph, 1, 1, 2),
                                   edge_id(graph, 0, 0, 4), edge_id(graph, 4, 1, 2)])
    jl.write_text(json.dumps({"topic_entities": ["ann"], "path": PQ_RELATIONS}) + "\n")
    paths, _ = gat_gold.resolve_paths(gat_gold.parse_questions(jl), inputs["entities"],
                                 inputs["relation_map"])
    assert len(gat_gold.gold_edges(paths, graph)[0]) == 5  # without answers: (1→3) too


def test_questions_file_errors(tmp_path):
    inputs = write_inputs(tmp_path / "in", PQ_TRIPLES, PQ_KEYS, PQ_RELATIONS)
    bad = tmp_path / "train.txt"
    bad.write_text("ok ?\tcat(cat/)\tann#parents#bob#gender#cat#<end>#cat\nbroken line\n")
    with pytest.raises(StageError, match=r"train.txt:2"):
        gat_gold.parse_questions(bad)
    dev = tmp_path / "dev.txt"
    dev.write_text("ok ?\tcat(cat/)\tann#parents#bob#gender#cat#<end>#cat\n")
    with pytest.raises(StageError, match="dev split"):
        run_stage(tmp_path, inputs, questions=str(dev))
    with pytest.raises(StageError, match="cannot read questions"):
        run_stage(tmp_path, inputs, questions=str(tmp_path / "missing.txt"))


# --------------------------------------------------------------------------------------------
# bad input


def test_bad_inputs_are_refused(tmp_path):
    inputs = write_inputs(tmp_path / "in", PQ_TRIPLES, PQ_KEYS, PQ_RELATIONS)
    with pytest.raises(StageError, match="needs inputs"):
        run_stage(tmp_path, {k: v for k, v in inputs.items() if k != "entity_vectors"})
    # entity vectors that miss an entity of the triples
    write_table("entity_ids", pa.table({"row": [0, 1, 2, 3, 4], "id": [0, 1, 2, 3, 9]}),
                Path(inputs["entity_ids"]))
    with pytest.raises(StageError, match="no vector"):
        run_stage(tmp_path, inputs)
    with pytest.raises(StageError, match="multiple of"):
        run_stage(tmp_path, inputs, hidden=10, heads=4)
    with pytest.raises(StageError, match="unknown config key"):
        run_stage(tmp_path, inputs, colour="blue")
