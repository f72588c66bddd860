"""GAT attention on PathQuestion: what the link-prediction and path terms do to gold-path α.

    python -m bench.gat_attention                          # PQ-2H and PQ-3H, 50 epochs
    python -m bench.gat_attention --datasets pq-2h --epochs 20 --json gat.json

For each dataset: run the pipeline stages ingest → … → scos_merge on its ``kb.txt`` (reused
from ``--workdir`` when already staged), encode the entities (``entity_encode``, MiniLM), then
train the GAT of ``training/gat.py`` twice from the same seed — with the path term on
``train.txt`` (``path_weight`` 1) and without it (link prediction only). Reported per run:

* link-prediction BCE per epoch (training batches; first → last) and on fixed triples with
  fixed negatives in eval mode, before → after;
* mean α over the distinct gold-path edges of TRAIN and DEV questions, untrained → trained,
  and the uniform α = 1/out-degree of the same edges for scale. Dev questions are only ever
  read here, for measurement; the model trains on ``train.txt`` alone.

Prints a Markdown table; ``--json`` also writes every number, per-epoch losses included.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from lokg.testing import REPO


DATA = REPO.parent / "shared" / "data" / "pathquestion"


def staged_inputs(dump: Path, workdir: Path) -> dict[str, str]:
    """Artefacts of ingest … scos_merge for ``dump`` (built once, then reused) + entity vectors."""
    from lokg.pipeline import driver as pipeline
    from lokg.pipeline.config import load_config
    from lokg.runtime.contract import Store, new_build_id
    from lokg.training import entity_encode as encode

    store = Store(workdir / "store")
    staging = workdir / "store" / "staging"
    done = sorted(p.name for p in staging.glob("*") if (p / "scos_merge" / "_stage.json").is_file()
                  ) if staging.is_dir() else []
    config = load_config(None, ["ingest.format=pathquestion"])
    build_id = done[-1] if done else new_build_id()
    if not done:
        for name in pipeline.STAGE_NAMES:
            record = pipeline.run_stage(store, build_id, name, config, str(dump))
            print(f"  {dump.name}: stage {name} {record['seconds']:.1f}s", file=sys.stderr)
            if name == "scos_merge":
                break
    inputs = pipeline.staged_outputs(pipeline.stage_records(store, build_id))
    enc_dir = workdir / "entity_encode"
    if not (enc_dir / "encoder.json").is_file():
        enc_dir.mkdir(parents=True, exist_ok=True)
        encode.run(config, inputs, str(enc_dir))
    inputs["entity_vectors"] = str(enc_dir / "entity_vectors.npy")
    inputs["entity_ids"] = str(enc_dir / "entity_ids.parquet")
    return inputs


def gold_for(path: Path, inputs: dict, graph) -> tuple:
    from lokg.training import gat_gold

    raw = gat_gold.parse_questions(path)
    paths, unknown = gat_gold.resolve_paths(raw, inputs["entities"], inputs["relation_map"])
    ids, missed = gat_gold.gold_edges(paths, graph)
    return ids, {"paths": len(raw.paths), "unknown": unknown, "no_walk": missed,
                 "gold_edges": len(ids)}


def run_dataset(name: str, data: Path, workdir: Path, epochs: int, device: str) -> dict:
    from lokg.pipeline.config import DEFAULTS
    from lokg.runtime.contract import read_table
    from lokg.training import gat, gat_inputs

    inputs = staged_inputs(data / name, workdir / name)
    triples = gat_inputs.read_triples(inputs["triples"])
    num_nodes = int(triples[:, [0, 2]].max()) + 1
    num_relations = read_table(Path(inputs["relations"]), "relations").num_rows
    graph = gat_inputs.Graph.from_triples(triples, num_nodes)
    x = gat_inputs.NodeFeatures(inputs["entity_vectors"], inputs["entity_ids"], num_nodes)
    rel_vec = gat_inputs.relation_vectors(inputs["relation_embeddings"], inputs["relation_map"],
                                          num_relations)
    train_gold, train_stats = gold_for(data / name / "train.txt", inputs, graph)
    dev_gold, dev_stats = gold_for(data / name / "dev.txt", inputs, graph)
    uniform = 1.0 / graph.out_degree()[graph.src]
    out = {"dataset": name, "triples": len(triples), "nodes": num_nodes,
           "relations": num_relations, "train_questions": train_stats, "dev_questions": dev_stats,
           "uniform": {"train": float(uniform[train_gold].mean()),
                       "dev": float(uniform[dev_gold].mean())}, "runs": {}}
    for variant, weight in (("link+path", 1.0), ("link only", 0.0)):
        cfg = {**DEFAULTS["gat"], "epochs": epochs, "path_weight": weight, "device": device}
        started = time.perf_counter()
        result = gat.train(graph, x, rel_vec, train_gold, cfg, log=lambda msg: None)
        out["runs"][variant] = {
            "seconds": round(time.perf_counter() - started, 2), "device": result.device,
            "link_per_epoch": [round(v, 5) for v in result.link],
            "path_per_epoch": [round(v, 5) for v in result.path] if weight else None,
            "eval_link": {"before": result.eval_link_before, "after": result.eval_link_after},
            "train_alpha": {"before": float(result.attention_before[train_gold].mean()),
                            "after": float(result.attention[train_gold].mean())},
            "dev_alpha": {"before": float(result.attention_before[dev_gold].mean()),
                          "after": float(result.attention[dev_gold].mean())},
        }
    return out


def table(results: list[dict]) -> str:
    lines = ["| dataset | run | link BCE (epoch 1 → last) | eval link BCE (before → after) | "
             "train gold α (before → after) | dev gold α (before → after) | uniform α train / dev "
             "| seconds |", "|" + "---|" * 8]
    for res in results:
        for variant, run in res["runs"].items():
            lines.append(
                f"| {res['dataset']} | {variant} | {run['link_per_epoch'][0]:.3f} → "
                f"{run['link_per_epoch'][-1]:.3f} | {run['eval_link']['before']:.3f} → "
                f"{run['eval_link']['after']:.3f} | {run['train_alpha']['before']:.3f} → "
                f"{run['train_alpha']['after']:.3f} | {run['dev_alpha']['before']:.3f} → "
                f"{run['dev_alpha']['after']:.3f} | {res['uniform']['train']:.3f} / "
                f"{res['uniform']['dev']:.3f} | {run['seconds']} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--datasets", nargs="+", default=["pq-2h", "pq-3h"])
    parser.add_argument("--data", type=Path, default=DATA, help="PathQuestion root")
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/lokg-bench-gat"),
                        help="staged builds and entity vectors, reused across runs")
    parser.add_argument("--epochs", type=int, default=50)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--json", type=Path, help="write every number here")
    args = parser.parse_args(argv)
    results = [run_dataset(name, args.data, args.workdir, args.epochs, args.device)
               for name in args.datasets]
    print(table(results))
    for res in results:
        for variant, run in res["runs"].items():
            every = max(1, len(run["link_per_epoch"]) // 10)
            shown = ", ".join(f"{v:.3f}" for v in run["link_per_epoch"][::every])
            print(f"{res['dataset']} {variant}: link BCE every {every} epochs: {shown}")
        print(f"{res['dataset']}: train questions {res['train_questions']}, "
              f"dev questions {res['dev_questions']}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
