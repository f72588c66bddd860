"""Checks of command-line runs: a refusal as a user sees it, a subprocess that has only the
thin runtime."""

from __future__ import annotations

#: Prepended to a subprocess's code: importing pyspark, torch or airflow (or what pulls torch)
#: fails, as in a venv that has only the thin runtime.
BLOCK_HEAVY = """
import importlib.abc, sys
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split('.')[0] in {'pyspark', 'torch', 'airflow', 'sentence_transformers'}:
            raise ImportError('blocked ' + name)
sys.meta_path.insert(0, Block())
"""


def assert_clean_error(output: str, exit_code: int, expected_code: int, *names: str) -> None:
    """A refusal as a user should see it: the expected exit code, no Python traceback nor
    Java stack, and a message naming each of ``names`` (the bad input, where it is)."""
    assert exit_code == expected_code, output
    assert "Traceback" not in output and "\n\tat " not in output, output
    for name in names:
        assert name in output, f"{name!r} not in the output:\n{output}"
