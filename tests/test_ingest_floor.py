"""bench/ingest_floor.py: the lines a refresh's one read finds changed, per file."""

from __future__ import annotations

import gzip

from bench.ingest_floor import measure


def test_changed_lines_are_the_multiset_difference_per_file(tmp_path):
    before, after = tmp_path / "before", tmp_path / "after"
    for root in (before, after):
        root.mkdir()
        (root / "names.txt").write_text("m1\tAlice\nm2\tBob\n", encoding="utf-8")
    (before / "kg.txt").write_text("a\tr\tb\nb\tr\tc\nb\tr\tc\nc\tr\ta\n", encoding="utf-8")
    # one copy of a duplicated line gone, one line removed, one added, order moved
    (after / "kg.txt").write_text("c\tr\td\nb\tr\tc\na\tr\tb\n", encoding="utf-8")
    for root, text in ((before, b"x\ny\n"), (after, b"y\nz\n")):
        (root / "more.txt.gz").write_bytes(gzip.compress(text))
    got = measure(before, after, repetitions=1)
    files = got["files"]
    assert files["names.txt"] == {"bytes": 16, "lines": 2, "changed_distinct_lines": 0,
                                  "unchanged": True}
    assert files["kg.txt"]["lines"] == 3 and files["kg.txt"]["changed_distinct_lines"] == 3
    assert files["more.txt.gz"]["lines"] == 2 and files["more.txt.gz"]["changed_distinct_lines"] == 2
    assert got["changed_distinct_lines"] == 5 and got["lines"] == 7
