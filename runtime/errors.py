"""The root of every error LOKG raises on bad input or a bad store.

``except LokgError`` catches all of them (CLI, server, DAG tasks); each subclass keeps the
standard base that says what kind of failure it is (``ValueError`` for a refused argument,
``RuntimeError`` for a failed call), and its message names what was wrong and where.
"""


class LokgError(Exception):
    """Something LOKG refused or could not do; the message says what and where."""
