"""bench/feedback_rounds.py: the sparsified start withholds a seeded share of the distinct folded
triples from every passage stating them, and a work directory refuses other settings (but takes
arms added to the script since)."""

from __future__ import annotations

import pytest

from bench import feedback_rounds as fr


def test_withheld_triples_leave_every_passage_and_only_them():
    docs = [{"title": "A", "extracted_triples": [["Febaville", "in", "Febaland"],
                                                  ["Lorvin", "near", "Febaville"], ["x"]]},
            {"title": "B", "extracted_triples": [["febaville ", "In", "FEBALAND"],
                                                  ["Kest", "of", "Kest"], ["Oda", "by", "Lorvin"]]}]
    sparse, gone = fr.withhold(docs, 0.34, seed=1)
    assert len(gone) == 1  # round(0.34 * 3 distinct well-formed, head != tail)
    left = [fr.folded(t) for d in sparse for t in d["extracted_triples"]]
    assert gone[0] not in left
    kept = {k for d in docs for t in d["extracted_triples"] if (k := fr.folded(t))} - set(gone)
    assert kept <= set(left)
    assert fr.withhold(docs, 0.34, seed=1)[1] == gone  # seeded


def test_a_work_directory_refuses_other_settings(tmp_path):
    args = fr.parse_args(["--work", str(tmp_path), "--questions", "3"])
    fr.check_settings(args)
    fr.check_settings(args)  # the same settings: reused
    args.withhold = 0.5
    with pytest.raises(SystemExit, match="withhold"):
        fr.check_settings(args)


def test_a_work_directory_takes_arms_added_since_and_refuses_changed_ones(tmp_path, monkeypatch):
    """The 50-question WORK was refused when the arm feedback-questions was added to the
    script: its other arms' settings had not changed."""
    import json

    args = fr.parse_args(["--work", str(tmp_path), "--questions", "3"])
    fr.check_settings(args)
    monkeypatch.setitem(fr.ARMS, "new-arm", ["query.feedback_bridges=1"])
    fr.check_settings(args)  # added: recorded beside the others
    recorded = json.loads((tmp_path / "settings.json").read_text())["arms"]
    assert recorded["new-arm"] == ["query.feedback_bridges=1"] and set(recorded) == set(fr.ARMS)
    monkeypatch.delitem(fr.ARMS, "new-arm")
    fr.check_settings(args)  # an arm the script no longer has: its record stays
    assert "new-arm" in json.loads((tmp_path / "settings.json").read_text())["arms"]
    monkeypatch.setitem(fr.ARMS, "feedback-precomputed", ["feedback_enrich.k=5"])
    with pytest.raises(SystemExit, match="arms.feedback-precomputed"):
        fr.check_settings(args)


def test_a_rounds_links_are_counted_by_method_with_the_qualified_pairs(tmp_path):
    import json

    out = tmp_path / "run" / "lokg"
    out.mkdir(parents=True)
    linked = [[{"method": "exact", "span": "manchuria", "name": "Manchuria"},
               {"method": "qualified", "span": "manchuria", "name": "Soviet invasion of Manchuria"}],
              [{"method": "qualified", "span": "manchuria", "name": "Soviet invasion of Manchuria"},
               {"method": "vector", "span": "q", "name": "Antarctica"}], []]
    out.joinpath("predictions.jsonl").write_text(
        "".join(json.dumps({"details": {"linked": links}}) + "\n" for links in linked))
    assert fr.link_methods(tmp_path / "run") == {
        "by_method": {"exact": 1, "qualified": 2, "vector": 1},
        "qualified": [("manchuria", "Soviet invasion of Manchuria")]}


def test_recall_misses_counts_undirected_hops_up_to_four():
    from bench.recall_misses import hops

    chain = {i: {i - 1, i + 1} - {-1, 7} for i in range(7)}  # 0 - 1 - ... - 6
    assert hops(chain, [0], {4}) == 4 and hops(chain, [3, 0], {4}) == 1
    assert hops(chain, [0], {5}) is None and hops(chain, [0], {0}) == 0


def test_rounds_diff_lists_the_questions_that_lose_or_never_have_their_gold(tmp_path):
    import json

    from bench.rounds_diff import diff, rounds

    def record(qid, hit, source):
        return {"id": qid, "question": f"question {qid}?", "gold": [f"gold {qid}"],
                "predicted": [f"answer {qid}"], "status": "ok",
                "details": {"route": {"source": source}}, "reading": {"context_recall": hit}}

    marks = {"kept": (1, 1), "lost": (1, 0), "never": (0, 0)}
    for number in (0, 1):
        run = tmp_path / f"round-{number}" / "run" / "lokg"
        run.mkdir(parents=True)
        run.joinpath("predictions.jsonl").write_text("".join(
            json.dumps(record(q, hit[number], "derived" if q == "lost" and number else
                              "retrieval")) + "\n" for q, hit in marks.items()))
    table = diff(rounds(tmp_path), [])
    assert "question kept?" not in table
    assert "| question lost? | gold lost | 1 0 | retr deri |" in table
    assert "| question never? | gold never | 0 0 | retr retr |" in table
    assert table.endswith("run: context recall by round 0.67 0.33")


def test_every_arm_keeps_each_rounds_build_for_a_reanswer():
    """rounds_diff --reanswer answers a round's build again; the store's default retention
    (publish.keep 3) would have deleted rounds 0 and 1 of a 5-round run."""
    for arm in fr.ARMS:
        config = fr.build_config({"sparse": "sparse.json", "full": "full.json"}, arm)
        assert config["publish"]["keep"] >= 10
