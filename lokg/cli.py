"""The ``lokg`` command: the one place that assembles it, above every package it draws on.

The runtime's group (``query``, ``serve``, ``store``, ``feedback``, ``scos-report``) gets the
build commands of ``lokg.pipeline.cli`` and ``lokg eval`` of ``lokg.evaluation.cli``; no lower
package imports another's commands. A query host with only the runtime's dependencies still
has ``python -m lokg.runtime.cli``.
"""

from __future__ import annotations

import sys

from lokg.evaluation.cli import eval_command
from lokg.pipeline.cli import BUILD_COMMANDS
from lokg.runtime.cli import cli

for command in (*BUILD_COMMANDS, eval_command):
    cli.add_command(command)


def main() -> None:
    cli(prog_name="lokg")


if __name__ == "__main__":
    sys.exit(main())
