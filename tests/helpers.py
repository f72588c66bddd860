"""Assertions several test modules share."""

from __future__ import annotations


def assert_clean_error(output: str, exit_code: int, expected_code: int, *names: str) -> None:
    """A refusal as a user should see it: the expected exit code, no Python traceback nor
    Java stack, and a message naming each of ``names`` (the bad input, where it is)."""
    assert exit_code == expected_code, output
    assert "Traceback" not in output and "\n\tat " not in output, output
    for name in names:
        assert name in output, f"{name!r} not in the output:\n{output}"
