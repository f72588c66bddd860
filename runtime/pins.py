"""Reader pins: a build a process has open is not deleted under it by retention.

A reader (``Runtime.open``, hence every served build) leaves one small file,
``<store>/pins/<build_id>/<host>-<pid>-<token>``, for as long as it holds the build. Retention
(``Store.collect_garbage``) skips a build with a live pin and deletes it at a later run once
the pin is gone. Why pins and not only a grace period after a build stops being CURRENT: a
rollback can make any old build the served one for days, and a Python API user may keep a
``Runtime`` of a non-CURRENT build open for as long as they like; no fixed grace covers both.

A pin is live while its process is (checked by pid when the pin was written on this host) or,
for pins from other hosts sharing the store, while its file was touched within
:data:`PIN_TTL_S` — a daemon thread touches this process's pins every :data:`HEARTBEAT_S`. A
killed reader therefore stops protecting its build at once on its own host and after the TTL
elsewhere. Stale pins are removed by retention.
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path

log = logging.getLogger("lokg.pins")

PINS_DIR = "pins"
#: A pin from another host counts as live for this long after its last heartbeat.
PIN_TTL_S = 300.0
HEARTBEAT_S = 30.0

_HOST = socket.gethostname().replace("-", "_")
#: What this process holds -> how to refresh its heartbeat (a file pin here; an object pin of a
#: store on object storage, runtime/object_store.py).
_held: dict[object, Callable[[], None]] = {}
_held_lock = threading.Lock()
_heartbeat: threading.Thread | None = None


def pins_dir(root: Path, build_id: str) -> Path:
    return Path(root) / PINS_DIR / build_id


def pin(root: Path, build_id: str) -> Path | None:
    """Write a pin for ``build_id`` held by this process; None when the store is read-only
    (the reader still works, unprotected, and says so in the log)."""
    path = pins_dir(root, build_id) / pin_name()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch()
    except OSError as exc:
        log.warning("cannot pin build %s in %s (%s): retention may delete it while it is open",
                    build_id, root, exc)
        return None
    hold(path, lambda: os.utime(path))
    return path


def hold(handle, touch: Callable[[], None]) -> None:
    """Call ``touch()`` every :data:`HEARTBEAT_S` until :func:`drop` (``handle``'s liveness)."""
    with _held_lock:
        _held[handle] = touch
    _start_heartbeat()


def drop(handle) -> None:
    with _held_lock:
        _held.pop(handle, None)


def release(path: Path | None) -> None:
    """Remove a pin (idempotent; safe at interpreter exit)."""
    if path is None:
        return
    drop(path)
    try:
        path.unlink()
    except OSError:
        pass


def live_pins(root: Path, build_id: str, *, now: float | None = None) -> list[Path]:
    """The live pins on ``build_id``; stale ones (dead process, expired heartbeat) are removed."""
    directory = pins_dir(root, build_id)
    if not directory.is_dir():
        return []
    now = time.time() if now is None else now
    live = []
    for path in sorted(directory.iterdir()):
        if _is_live(path, now):
            live.append(path)
        else:
            release(path)
    return live


def pin_name() -> str:
    """A new pin's name: ``<host>-<pid>-<token>``, so that the host can check the pid."""
    return f"{_HOST}-{os.getpid()}-{secrets.token_hex(4)}"


def is_live(name: str, touched: Callable[[], float], now: float) -> bool:
    """A pin named ``name`` is live: its pid runs (pins of this host) or ``touched()``, the
    time of its last heartbeat, is within :data:`PIN_TTL_S` (FileNotFoundError: gone)."""
    host, _, rest = name.partition("-")
    pid = rest.partition("-")[0]
    if host == _HOST and pid.isdigit():
        return _pid_alive(int(pid))
    try:
        return now - touched() < PIN_TTL_S
    except FileNotFoundError:
        return False


def _is_live(path: Path, now: float) -> bool:
    return is_live(path.name, lambda: path.stat().st_mtime, now)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive
        return True
    return True


def _start_heartbeat() -> None:
    global _heartbeat
    with _held_lock:
        if _heartbeat is not None and _heartbeat.is_alive():
            return
        _heartbeat = threading.Thread(target=_beat, name="lokg-pin-heartbeat", daemon=True)
        _heartbeat.start()


def _beat() -> None:
    while True:
        time.sleep(HEARTBEAT_S)
        with _held_lock:
            held = list(_held.values())
        for touch in held:
            try:
                touch()
            except Exception:  # removed by hand or by a retention run that judged it stale,
                log.debug("pin heartbeat failed", exc_info=True)  # or the store unreachable
