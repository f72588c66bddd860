"""bench/feedback_rounds.py: the sparsified start withholds a seeded share of the distinct folded
triples from every passage stating them, and a work directory refuses other settings."""

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
