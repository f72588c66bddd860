"""pipeline/dump_edit.py: an edited dump changes the share of triples asked for, seeded, with
no entity or relation that was not there (FB15k-237) and nothing else touched."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from lokg.pipeline.dump_edit import FB15K237_SPLITS, edit_dump, edit_fb15k237_dump, synth_edge_count


def edge_lines(dump: Path) -> set[str]:
    return {line for line in (dump / "kg.nt").read_text().splitlines()
            if line.count(" ") == 3 and "/ns/m." in line.split(" ")[2]
            and "type.object.type" not in line}


@pytest.fixture(scope="module")
def synth(tmp_path_factory):
    from lokg.pipeline.synth import generate

    root = tmp_path_factory.mktemp("dump-edit")
    generate(root / "d1", n_triples=300, seed=3, n_questions=0)
    return root


def test_synthetic_edit_removes_and_adds_the_share_of_edges(synth):
    edges = synth_edge_count(synth / "d1")
    edit = edit_dump(synth / "d1", synth / "d2", fraction=0.05, seed=1)
    changed = round(0.05 * edges)
    assert edit == {"format": "synth", "triples": edges, "removed": changed, "added": changed}
    before, after = edge_lines(synth / "d1"), edge_lines(synth / "d2")
    assert len(before - after) == changed
    assert 0 < len(after - before) <= changed  # an added edge may repeat a kept one
    assert (synth / "d1" / "manifest.json").read_bytes() == \
        (synth / "d2" / "manifest.json").read_bytes()


def test_synthetic_edit_is_seeded(synth):
    edit_dump(synth / "d1", synth / "a", fraction=0.05, seed=7)
    edit_dump(synth / "d1", synth / "b", fraction=0.05, seed=7)
    edit_dump(synth / "d1", synth / "c", fraction=0.05, seed=8)
    texts = [(synth / d / "kg.nt").read_text() for d in "abc"]
    assert texts[0] == texts[1] != texts[2]


def fb15k237(root: Path, seed: int = 0) -> Path:
    """A small FB15k-237-style dump: 60 triples over 12 entities and 3 relations, one
    repeated across two splits, plus a name file."""
    rng = random.Random(seed)
    triples = sorted({(f"/m/e{rng.randrange(12)}", f"/r/rel{rng.randrange(3)}",
                       f"/m/e{rng.randrange(12)}") for _ in range(80)})[:60]
    root.mkdir()
    for i, name in enumerate(FB15K237_SPLITS):
        part = triples[i * 20:(i + 1) * 20] + ([triples[0]] if i == 2 else [])
        (root / name).write_text("".join("\t".join(t) + "\n" for t in part))
    (root / "entity2name.txt").write_text("".join(f"/m/e{i}\tE {i}\n" for i in range(12)))
    return root


def triples_of(dump: Path) -> list[tuple[str, ...]]:
    return [tuple(line.split("\t")) for name in FB15K237_SPLITS
            for line in (dump / name).read_text().splitlines()]


def test_fb15k237_edit_takes_triples_out_of_every_split_and_adds_new_ones(tmp_path):
    src = fb15k237(tmp_path / "fb")
    edit = edit_fb15k237_dump(src, tmp_path / "fb2", remove=6, add=5, seed=2)
    before, after = set(triples_of(src)), set(triples_of(tmp_path / "fb2"))
    assert edit["triples"] == 60 and len(after) == 60 - 6 + 5
    assert set(edit["removed"]) == before - after
    assert set(edit["added"]) == after - before
    train = {tuple(line.split("\t")) for line in (tmp_path / "fb2" / "train.txt").read_text()
             .splitlines()}
    assert set(edit["added"]) <= train
    entities = {e for s, _, o in before for e in (s, o)}
    assert {e for s, _, o in after for e in (s, o)} <= entities
    assert {r for _, r, _ in after} <= {r for _, r, _ in before}
    assert all(s != o for s, _, o in edit["added"])
    assert (src / "entity2name.txt").read_text() == \
        (tmp_path / "fb2" / "entity2name.txt").read_text()


def test_fb15k237_edit_of_a_share_is_seeded(tmp_path):
    src = fb15k237(tmp_path / "fb")
    one = edit_dump(src, tmp_path / "a", fraction=0.1, seed=4)
    edit_dump(src, tmp_path / "b", fraction=0.1, seed=4)
    assert one == {"format": "fb15k237", "triples": 60, "removed": 6, "added": 6}
    assert triples_of(tmp_path / "a") == triples_of(tmp_path / "b")
