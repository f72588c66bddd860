"""GAT's warm start at several ``gat.refresh_learning_rate`` values, on a refresh that
``bench/warm_refresh.py`` left staged (its ``W/store``: build ``warm`` refreshing ``b1``).

    python -m bench.gat_warm_rate --work W --rates 0.005,0.0005

Runs stage ``gat`` alone with the refresh's inputs and the previous build's (``previous:``, as
the driver passes them) at each rate, into ``W/gat-rate/<rate>``, and prints per rate the fixed
eval link loss before (the previous parameters on the new graph) and after the warm epochs —
compare with the full build's in warm_refresh.py's output — and, when ``W/full`` holds that
full build, the agreement of the two attention tables (as warm_refresh.py measures it). A stage run, not a build: the
refresh's fingerprints (code, config) are not checked, so a code change since ``b1`` is fine.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from bench.common import attention_agreement, stage_record
from lokg.pipeline import driver
from lokg.pipeline.config import load_config
from lokg.runtime.contract import Store
from lokg.training import gat


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", required=True)
    parser.add_argument("--rates", default="0.005,0.0005")
    args = parser.parse_args()
    store = Store(Path(args.work) / "store")
    inputs = {**driver.collect_inputs(store, "warm", None, "gat"),
              **driver.previous_inputs(store, "b1", "gat")}
    for rate in args.rates.split(","):
        config = load_config(None, [f"gat.refresh_learning_rate={rate}"])
        result = gat.run(config, inputs, str(Path(args.work) / "gat-rate" / rate))
        report, full = result["report"], Path(args.work) / "full"
        agreement = attention_agreement(Path(result["outputs"]["edges"]), Path(
            stage_record(full, "full", "gat")["outputs"]["edges"])) if full.exists() else None
        print(json.dumps({"rate": float(rate), "refresh": report["refresh"]["start"],
                          "epochs": report["epochs"], "eval_link_loss": report["eval_link_loss"],
                          "seconds_per_epoch": report["seconds_per_epoch"],
                          "attention_vs_full": agreement}), flush=True)


if __name__ == "__main__":
    main()
