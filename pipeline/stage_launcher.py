"""The command line of every build stage, chosen by name: the one file ``spark-submit`` runs for
a Spark stage and the one module ``python -m`` runs for the others (the lokg_build DAG's tasks)::

    spark-submit pipeline/stage_launcher.py STAGE --store S --build-id B [--dump D] [--set K=V]
    python -m lokg.pipeline.stage_launcher STAGE --store S --build-id B [--dump D] [--set K=V]

It runs the stage through ``pipeline.driver.run_stage`` and prints its name and seconds as one
JSON line. The stage modules have no command line of their own: they sit below the pipeline and
never import it.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from lokg.pipeline.driver import run_stage
from lokg.pipeline.registry import STAGE_NAMES
from lokg.pipeline.config import load_config
from lokg.runtime.config import ConfigError
from lokg.runtime.contract import Store

#: The application file to hand to ``spark-submit``, the stage's name its first argument.
SCRIPT = Path(__file__).resolve()


def stage_main(name: str, argv: list[str] | None = None) -> None:
    """Command line of stage ``name``: its options, a bad config one usage line (exit 2)
    before the stage (and Spark) starts."""
    parser = argparse.ArgumentParser(prog=f"lokg-stage-{name}", description=f"Run stage '{name}'.")
    parser.add_argument("--store", required=True, help="store root")
    parser.add_argument("--build-id", required=True, help="build being assembled")
    parser.add_argument("--dump", help="raw dump (file or directory)")
    parser.add_argument("--config", help="YAML/JSON config file")
    parser.add_argument("--set", dest="overrides", action="append", default=[],
                        metavar="KEY=VALUE", help="config override, repeatable")
    args = parser.parse_args(argv)
    try:
        config = load_config(args.config, args.overrides)
    except ConfigError as exc:  # one line and exit 2, before the stage (and Spark) starts
        parser.error(str(exc))
    record = run_stage(Store(args.store), args.build_id, name, config, args.dump)
    print(json.dumps({"stage": name, "seconds": record["seconds"]}))


def main(argv: list[str] | None = None) -> None:
    """``STAGE [stage options]``: the stage's own command line (:func:`stage_main`)."""
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] not in STAGE_NAMES:  # help, or a usage error naming the stages
        launcher = argparse.ArgumentParser(
            prog="lokg-stage", description="Run one build stage; STAGE -h: its options.")
        launcher.add_argument("stage", choices=STAGE_NAMES, metavar="STAGE",
                              help=f"the stage to run: {', '.join(STAGE_NAMES)}")
        launcher.parse_args(args[:1])
    stage_main(args[0], args[1:])


if __name__ == "__main__":
    main()
