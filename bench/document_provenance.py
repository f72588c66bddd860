"""Provenance of a store built from documents: every triple has a source, and a
source passage of each triple (title and text) holds the triple's head (its name or an alias),
with the exceptions listed by name.

    python -m bench.document_provenance --store /tmp/mq [--json]
"""

from __future__ import annotations

import argparse
import json

from lokg.runtime.contract import Store
from lokg.text.triple_context import head_check


def provenance(store: str, shown: int) -> dict:
    build = Store(store).build()
    report = head_check(build.read("triple_sources"), build.read("chunks"),
                        build.read("documents"), build.read("entities", ["name", "aliases"]),
                        shown=shown)
    names = build.read("entities", columns=["name"]).column("name").to_pylist()
    relations = dict(zip(*(build.read("relations").column(c).to_pylist() for c in ("id", "name"))))
    report["head_exceptions"] = [[names[s], relations[r], names[o]]
                                 for s, r, o in report["head_exceptions"]]
    report.update({"build_id": build.build_id, "triples": build.rows("triples"),
                   "documents": build.rows("documents"),
                   "restored_sentences": build.rows("triple_context")})
    report["triples_without_source"] = report["triples"] - report["triples_with_sources"]
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", required=True)
    parser.add_argument("--shown", type=int, default=20, help="exceptions listed")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    report = provenance(args.store, args.shown)
    if args.json:
        print(json.dumps(report, indent=2, ensure_ascii=False))
        return
    print(f"build {report['build_id']}: {report['documents']:,} documents, "
          f"{report['triples']:,} triples, {report['triples_without_source']} without a source, "
          f"{report['head_in_a_source']:,} of {report['triples_with_sources']:,} with their head "
          f"in a source passage; {report['restored_sentences']:,} restored sentences")
    for triple in report["head_exceptions"]:
        print("  exception: " + " | ".join(triple))


if __name__ == "__main__":
    main()
