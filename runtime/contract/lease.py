"""The build lease: one build at a time on a store, refused at its start.

``lokg build`` and ``lokg publish`` hold :data:`BUILD_LEASE_FILE` in the store root from their
first step to their last. A second one started meanwhile is refused at once, naming the store
and the build holding the lease, before it writes anything: no staging directory, no publish,
no rotation of the refresh cache the first one reads from. The lease names its holder as a pin
does (``<host>-<pid>-<token>``, runtime/pins.py) and is kept alive the same way: a holder on
this host is live while its process runs, one on another host while its heartbeat (the file's
mtime, touched every ``pins.HEARTBEAT_S``) is younger than ``pins.PIN_TTL_S``. A stale lease
(a killed build) is taken over with a warning. The check-and-take is under ``flock`` for a few
milliseconds: as for the publish lock, reliable on a local disk, not on every network
filesystem.
"""

from __future__ import annotations

import datetime as _dt
import fcntl
import json
import logging
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from lokg.runtime import pins
from lokg.runtime.contract.layout import BUILD_LEASE_FILE, StoreError

log = logging.getLogger("lokg.store")


@contextmanager
def build_lease(root: str | os.PathLike, build_id: str) -> Iterator[Path]:
    """Hold the store's build lease for ``build_id`` (StoreError naming the holder when another
    live build has it); the store root is made if missing. Released on exit."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    path = root / BUILD_LEASE_FILE
    mine = {"build_id": build_id, "holder": pins.pin_name(),
            "since": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")}
    with _flocked(path) as fh:
        _check_free(fh, path, build_id)
        _write(fh, mine)
    pins.hold(path, lambda: os.utime(path))
    try:
        yield path
    finally:
        pins.drop(path)
        with _flocked(path) as fh:
            if _holder(fh).get("holder") == mine["holder"]:
                _write(fh, None)


@contextmanager
def _flocked(path: Path):
    with open(path, "a+", encoding="utf-8") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield fh
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _holder(fh) -> dict:
    """The lease's holder as written (empty: free; unreadable content counts as free)."""
    fh.seek(0)
    try:
        holder = json.loads(fh.read() or "{}")
    except ValueError:
        return {}
    return holder if isinstance(holder, dict) else {}


def _write(fh, holder: dict | None) -> None:
    fh.seek(0)
    fh.truncate()
    if holder is not None:
        fh.write(json.dumps(holder, sort_keys=True) + "\n")
    fh.flush()
    os.fsync(fh.fileno())


def _check_free(fh, path: Path, build_id: str) -> None:
    """Refuse ``build_id`` while a live holder has the lease; a stale one is taken over."""
    holder = _holder(fh)
    name = str(holder.get("holder", ""))
    if not name:
        return
    host, _, rest = name.partition("-")
    who = f"build {holder.get('build_id')} (pid {rest.partition('-')[0]} on {host}, " \
          f"since {holder.get('since')})"
    if pins.is_live(name, lambda: path.stat().st_mtime, time.time()):
        raise StoreError(f"{path.parent}: build {build_id} refused at its start: {who} is "
                         f"running on this store; wait for it to end, or if it is not running "
                         f"any more (killed on another host), delete {path}")
    log.warning("%s: taking over the build lease of %s, which is not running any more",
                path.parent, who)
