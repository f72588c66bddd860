"""The root of every error LOKG raises on bad input or a bad store.

``except LokgError`` catches all of them (CLI, server, DAG tasks); each subclass keeps the
standard base that says what kind of failure it is (``ValueError`` for a refused argument,
``RuntimeError`` for a failed call), and its message names what was wrong and where.
"""

import errno
import re


class LokgError(Exception):
    """Something LOKG refused or could not do; the message says what and where."""


#: OSErrors of the machine rather than of LOKG: a full disk or quota, a read-only or denied path.
DISK_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM})
_DETAIL_ERRNO = re.compile(r"\[errno (\d+)\]", re.IGNORECASE)  # pyarrow: "... Detail: [errno 28] …"


def disk_error_line(exc: OSError, where: str) -> str | None:
    """One line for ``exc`` met while writing ``where`` (a store) when it is a full or read-only
    disk or a denied path: the reason, then the path when the error names one (pyarrow's "Error
    writing bytes to file" names none). None for any other OSError, whose traceback is wanted."""
    text = str(exc).strip()
    code = exc.errno
    if code is None and (found := _DETAIL_ERRNO.search(text)):
        code = int(found.group(1))
    if code not in DISK_ERRNOS and not text.startswith("Error writing bytes"):
        return None
    reason = exc.strerror or (text.splitlines()[0] if text else type(exc).__name__)
    return f"{where}: {reason}" + (f": {exc.filename}" if exc.filename else "")
