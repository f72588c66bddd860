"""Checks of command-line runs: a refusal as a user sees it, a subprocess that has only the
thin runtime."""

from __future__ import annotations


def blocking(*packages: str) -> str:
    """Code to prepend to a subprocess's: importing any of ``packages`` (or a module of one)
    fails, as in a venv that does not have them."""
    return ("\nimport importlib.abc, sys\n"
            "class Block(importlib.abc.MetaPathFinder):\n"
            "    def find_spec(self, name, path=None, target=None):\n"
            f"        if name.split('.')[0] in {tuple(sorted(packages))!r}:\n"
            "            raise ImportError('blocked ' + name)\n"
            "sys.meta_path.insert(0, Block())\n")


#: Prepended to a subprocess's code: importing pyspark, torch or airflow (or what pulls torch)
#: fails, as in a venv that has only the thin runtime.
BLOCK_HEAVY = blocking("pyspark", "torch", "airflow", "sentence_transformers")


def assert_clean_error(output: str, exit_code: int, expected_code: int, *names: str) -> None:
    """A refusal as a user should see it: the expected exit code, no Python traceback nor
    Java stack, and a message naming each of ``names`` (the bad input, where it is)."""
    assert exit_code == expected_code, output
    assert "Traceback" not in output and "\n\tat " not in output, output
    for name in names:
        assert name in output, f"{name!r} not in the output:\n{output}"
