"""The store on the local filesystem: reading builds, and the writers — atomic publish,
rollback and retention — under one lock."""

from __future__ import annotations

import datetime as _dt
import fcntl
import json
import os
import secrets
import shutil
import socket
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import pyarrow.parquet as pq

from lokg.runtime import pins
from lokg.runtime.contract.build import (Build, describe_files, load_manifest, parquet_rows,
                                         verify_build)
from lokg.runtime.contract.files import check_schema, fsync_dir, table_files, write_atomic
from lokg.runtime.contract.layout import (BUILD_ID_PATTERN, BUILDS_DIR, CURRENT_FILE, DOOMED_FILE,
                                          LOCK_FILE, LOCK_TIMEOUT_S, MANIFEST_FILE,
                                          PARTIAL_PREFIX, REFRESH_DIR, SCHEMA_VERSION,
                                          STAGING_DIR, StoreError, check_build_id, is_url)
from lokg.runtime.contract.schemas import REQUIRED_TABLES, TABLE_SCHEMAS

PublishHook = Callable[[str], None]


class Store:
    """A store root on the local filesystem.

    Writers of CURRENT and deleters of builds (publish, rollback, retention) hold one
    exclusive lock, so CURRENT only ever moves to a build that exists and nothing deletes a
    build another writer is about to make CURRENT; readers take no lock, they pin
    (:meth:`pin`). The lock is ``flock`` on :data:`LOCK_FILE`: reliable on a local disk,
    not on every network filesystem.
    """

    def __init__(self, root: str | os.PathLike):
        if is_url(root):  # Path("s3://b/p") would quietly be the local directory "s3:/b/p"
            raise StoreError(f"{root}: builds are assembled in a local store; publish there, "
                             "then `lokg store push LOCAL_STORE URL` (runtime/object_store.py)")
        self.root = Path(root)

    # -- paths
    @property
    def builds_dir(self) -> Path:
        return self.root / BUILDS_DIR

    def staging_dir(self, build_id: str) -> Path:
        return self.root / STAGING_DIR / check_build_id(build_id)

    def refresh_dir(self, build_id: str) -> Path:
        return self.root / REFRESH_DIR / check_build_id(build_id)

    def refresh_base(self) -> str | None:
        """The build whose stage outputs the refresh cache holds: CURRENT's when cached,
        else the newest cached one (a crash between caching and pruning leaves two), else
        None. What is reused from it is decided by fingerprints, so any cached build is safe."""
        cached = sorted(p.name for p in (self.root / REFRESH_DIR).glob("*")
                        if _real_dir(p) and BUILD_ID_PATTERN.fullmatch(p.name))
        if not cached:
            return None
        current = self.current_id()
        return current if current in cached else cached[-1]

    def keep_for_refresh(self, build_id: str) -> Path:
        """Move a published build's staging directory into the refresh cache in one rename,
        then delete every other cached build. A retry after a crash finds the move done; a
        rerun of an already published and cached build drops its new staging."""
        cached = self.refresh_dir(build_id)
        staging = self.staging_dir(build_id)
        if staging.is_dir() and not cached.exists():
            cached.parent.mkdir(parents=True, exist_ok=True)
            os.rename(staging, cached)
        elif staging.is_dir():  # the same build staged again: its cache is there already
            _delete_out_of_sight(staging)
        for other in cached.parent.iterdir():
            if other.name != build_id:
                _delete_out_of_sight(other)
        return cached

    # -- reading
    def current_id(self) -> str | None:
        return read_current(self.root / CURRENT_FILE)

    def build_ids(self) -> list[str]:
        """Ids of complete builds (those with a manifest), oldest first; a symlink is none."""
        if not self.builds_dir.is_dir():
            return []
        return sorted(
            p.name
            for p in self.builds_dir.iterdir()
            if _real_dir(p) and not p.name.startswith(".") and (p / MANIFEST_FILE).is_file()
        )

    def build(self, build_id: str | None = None, *, verify: bool = False) -> Build:
        """Open a build (default: the one CURRENT names). ``verify`` checks every checksum."""
        if not self.root.is_dir():
            raise StoreError(f"{self.root}: store root does not exist")
        if build_id is None:
            build_id = self.current_id()
            if build_id is None:
                raise StoreError(f"{self.root / CURRENT_FILE}: no published build in this store")
        path = self.builds_dir / check_build_id(build_id)
        if not path.is_dir() or (path / DOOMED_FILE).exists():
            raise StoreError(f"{path}: build '{build_id}' does not exist")
        build = Build(self.root, build_id, load_manifest(path))
        if verify:
            verify_build(build)
        return build

    def pin(self, build_id: str) -> Path | None:
        """Protect ``build_id`` from retention while this process reads it; release with
        ``pins.release``. Raises StoreError when retention is deleting the build already."""
        held = pins.pin(self.root, check_build_id(build_id))
        if (self.builds_dir / build_id / DOOMED_FILE).exists() \
                or not (self.builds_dir / build_id).is_dir():
            pins.release(held)
            raise StoreError(f"{self.builds_dir / build_id}: build '{build_id}' does not exist")
        return held

    # -- writing
    @contextmanager
    def locked(self, what: str, timeout: float = LOCK_TIMEOUT_S) -> Iterator[None]:
        """Hold the store's writer lock for ``what``; waits up to ``timeout`` s, then refuses
        naming the holder. Only publish creates a store root; the others refuse a missing one."""
        if not self.root.is_dir():
            raise StoreError(f"{self.root}: store root does not exist")
        path = self.root / LOCK_FILE
        with open(path, "a+", encoding="utf-8") as fh:
            deadline = time.monotonic() + timeout
            while True:
                try:
                    fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        fh.seek(0)
                        raise StoreError(f"{path}: {what} refused: the store is locked by "
                                         f"{fh.read().strip() or 'another writer'} "
                                         f"for more than {timeout:.0f} s") from None
                    time.sleep(0.05)
            fh.seek(0)
            fh.truncate()
            fh.write(f"{what} (pid {os.getpid()} on {socket.gethostname()})\n")
            fh.flush()
            try:
                yield
            finally:
                fh.truncate(0)
                fcntl.flock(fh, fcntl.LOCK_UN)

    def publish(
        self,
        build_id: str,
        tables: Mapping[str, Path],
        *,
        extra_files: Mapping[str, Path] | None = None,
        info: Mapping | None = None,
        keep: int = 3,
        hook: PublishHook | None = None,
        expect_current: str | None | object = ...,
    ) -> Build:
        """Assemble a build from stage outputs and make it CURRENT, atomically.

        Steps, under the writer lock: copy into ``builds/.partial-<id>`` → write the manifest
        → rename to ``builds/<id>`` → swap CURRENT → retention. A crash before the CURRENT
        swap leaves the previous build published; ``hook(step)`` runs after each step (fault
        injection). A retry after a crash past the rename finds ``builds/<id>`` already there:
        when it verifies and holds exactly the same tables and files, the retry finishes the
        swap; anything else under that id is refused.

        Compare-and-swap: CURRENT must still be ``expect_current`` (default: what it was when
        this call began) once the lock is held — a publisher that waited while another one
        moved CURRENT is refused, naming both, instead of silently replacing its build.
        """
        hook = hook or (lambda step: None)
        check_build_id(build_id)
        check_keep(keep)
        expected = self.current_id() if expect_current is ... else expect_current
        missing = [t for t in REQUIRED_TABLES if t not in tables]
        if missing:
            raise StoreError(f"publish of {build_id}: required tables missing: {missing}")
        self.root.mkdir(parents=True, exist_ok=True)
        with self.locked(f"publish of {build_id}"):
            self._check_current_unmoved(build_id, expected)
            manifest = self._assemble(build_id, tables, extra_files, info, hook)
            write_atomic(self.root / CURRENT_FILE, build_id + "\n")
            hook("current")
            self._retain(keep)
        return Build(self.root, build_id, manifest)

    def _check_current_unmoved(self, build_id: str, expected: str | None) -> None:
        """Compare-and-swap: CURRENT is still ``expected`` (StoreError naming both if not)."""
        current = self.current_id()
        if current != expected:
            raise StoreError(f"publish of {build_id} refused: CURRENT moved from "
                             f"{expected} to {current} while it waited for the store lock; "
                             f"publish again to replace {current}")

    def _assemble(self, build_id: str, tables: Mapping[str, Path],
                  extra_files: Mapping[str, Path] | None, info: Mapping | None,
                  hook: PublishHook) -> dict:
        """Copy a build into ``builds/<id>`` with its manifest; the manifest it ends with."""
        final = self.builds_dir / build_id
        partial = self.builds_dir / f"{PARTIAL_PREFIX}{build_id}"
        if partial.exists():
            shutil.rmtree(partial)
        partial.mkdir(parents=True)
        table_entries = {table: _copy_table(table, Path(src), partial)
                         for table, src in tables.items()}
        for rel, src in (extra_files or {}).items():
            _copy_tree_or_file(Path(src), partial / rel)
        hook("copied")

        manifest = {
            "schema_version": SCHEMA_VERSION,
            "build_id": build_id,
            "created_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "tables": table_entries,
            "files": describe_files(partial),
            **dict(info or {}),
        }
        write_atomic(partial / MANIFEST_FILE, json.dumps(manifest, indent=2, sort_keys=True))
        hook("manifest")

        if final.exists():
            manifest = self._same_build(final, partial, manifest)
        else:
            os.rename(partial, final)
            fsync_dir(self.builds_dir)
        hook("renamed")
        return manifest

    def _same_build(self, final: Path, partial: Path, manifest: dict) -> dict:
        """The manifest of published ``final`` if it is the build assembled in ``partial``.

        ``partial`` is deleted either way; a published build that fails verification or holds
        other content is refused, naming what differs.
        """
        try:
            published = self.build(final.name, verify=True).manifest
        except StoreError as exc:
            shutil.rmtree(partial)
            raise StoreError(f"{final}: build already published and it does not verify, "
                             f"refusing to publish over it ({exc})") from None
        shutil.rmtree(partial)
        for key in ("tables", "files"):
            if published[key] != manifest[key]:
                differ = sorted(k for k in {*published[key], *manifest[key]}
                                if published[key].get(k) != manifest[key].get(k))
                raise StoreError(f"{final}: build already published with different content "
                                 f"({key} differ: {', '.join(differ[:5])})")
        return published

    def rollback(self, build_id: str) -> Build:
        """Point CURRENT at an older complete build after verifying it (under the lock, so
        retention cannot delete it between the check and the swap)."""
        check_build_id(build_id)
        with self.locked(f"rollback to {build_id}"):
            build = self.build(build_id, verify=True)
            write_atomic(self.root / CURRENT_FILE, build_id + "\n")
        return build

    def collect_garbage(self, keep: int = 3) -> list[str]:
        """Retention under the writer lock: see :meth:`_retain`."""
        check_keep(keep)
        with self.locked("retention"):
            return self._retain(keep)

    def _retain(self, keep: int) -> list[str]:
        """Delete complete builds beyond the newest ``keep`` previous ones, and stale partials.

        Never deleted: the CURRENT build and builds a live reader pins (runtime/pins.py) —
        those count towards ``keep`` and go at a later run once unpinned. The caller holds
        the lock.
        """
        current = self.current_id()
        others = [b for b in self.build_ids() if b != current]
        doomed = [b for b in others[: max(0, len(others) - keep)] if self._delete_unpinned(b)]
        if self.builds_dir.is_dir():
            for stale in filter(_real_dir, self.builds_dir.glob(f"{PARTIAL_PREFIX}*")):
                shutil.rmtree(stale)
        return doomed

    def _delete_unpinned(self, build_id: str) -> bool:
        """Delete a build unless a reader pins it. The tombstone goes first and the pins are
        read after it, so a reader pinning concurrently either is seen here or sees the
        tombstone (:meth:`pin`)."""
        path = self.builds_dir / build_id
        (path / DOOMED_FILE).touch()
        if pins.live_pins(self.root, build_id):
            (path / DOOMED_FILE).unlink()
            return False
        gone = self.builds_dir / f"{PARTIAL_PREFIX}{build_id}.deleted-{secrets.token_hex(4)}"
        os.rename(path, gone)
        shutil.rmtree(gone)
        shutil.rmtree(pins.pins_dir(self.root, build_id), ignore_errors=True)
        return True

    def collect_staging(self, older_than_s: float, *, now: float | None = None) -> list[str]:
        """Delete the staging directories in which nothing changed for ``older_than_s`` seconds.

        Publish deletes its own build's staging; what is left belongs to killed, failed or
        abandoned runs (or a publish that died before its clean-up). Age is the newest mtime of
        anything inside, so a stage still writing keeps its build alive. Returns the build ids.
        """
        if not self.root.is_dir():
            raise StoreError(f"{self.root}: store root does not exist")
        staging = self.root / STAGING_DIR
        now = time.time() if now is None else now
        doomed = [d for d in sorted(staging.iterdir()) if _real_dir(d)
                  and now - _newest_mtime(d) >= older_than_s] if staging.is_dir() else []
        for path in doomed:
            shutil.rmtree(path)
        return [d.name for d in doomed]


def read_current(path: Path) -> str | None:
    """The build id a CURRENT pointer at ``path`` names (None when there is none), refused
    with a StoreError naming ``path`` when it is not a readable file holding a build id."""
    if not path.exists():
        return None
    try:
        build_id = path.read_text(encoding="utf-8").strip()
    except UnicodeDecodeError as exc:
        raise StoreError(f"{path}: CURRENT pointer is not UTF-8 text (byte "
                         f"{exc.object[exc.start]:#04x} at offset {exc.start}); it must "
                         "hold a build id") from None
    except OSError as exc:  # a directory, unreadable: not a pointer either
        raise StoreError(f"{path}: CURRENT pointer cannot be read ({exc.strerror}); it "
                         "must be a file holding a build id") from None
    if not build_id:
        raise StoreError(f"{path}: empty CURRENT pointer")
    return check_build_id(build_id, str(path))


def _delete_out_of_sight(path: Path) -> None:
    """Rename a file or directory to a hidden name in one step, then delete it: a reader
    never sees half of it, and one left by a crash is hidden from the listings."""
    gone = path.with_name(f".{path.name.lstrip('.')}.deleted-{secrets.token_hex(4)}")
    os.rename(path, gone)
    if _real_dir(gone):
        shutil.rmtree(gone)
    else:
        gone.unlink()


def stray_entries(root: str | os.PathLike) -> list[Path]:
    """What lies in ``builds/`` or ``staging/`` of a store and is not a directory (a symlink, a
    file): no build. Retention and gc never follow nor delete one; ``lokg store gc`` names them."""
    found: list[Path] = []
    for sub in (BUILDS_DIR, STAGING_DIR):
        directory = Path(root) / sub
        if _real_dir(directory):
            found += [p for p in sorted(directory.iterdir()) if not _real_dir(p)]
    return found


def _real_dir(path: Path) -> bool:
    """A directory, not a symlink to one (which retention would follow out of the store)."""
    return path.is_dir() and not path.is_symlink()


def _newest_mtime(root: Path) -> float:
    newest = root.lstat().st_mtime
    for dirpath, dirnames, filenames in os.walk(root):
        for name in (*dirnames, *filenames):
            try:
                newest = max(newest, os.lstat(os.path.join(dirpath, name)).st_mtime)
            except FileNotFoundError:  # removed meanwhile by the stage writing it
                pass
    return newest


def check_keep(keep) -> int:
    """Retention's ``keep``: a count of previous builds (negative would delete them all)."""
    if isinstance(keep, bool) or not isinstance(keep, int) or keep < 0:
        raise StoreError(f"publish.keep: {keep!r} must be an integer >= 0 (previous builds kept)")
    return keep


def _copy_table(table: str, src: Path, partial: Path) -> dict:
    """Copy one table into a build being assembled (schema checked); its manifest entry."""
    data_files = table_files(src)
    schema = pq.read_schema(data_files[0]) if data_files else None
    if table in TABLE_SCHEMAS and schema is not None:
        check_schema(table, schema, data_files[0])
    rel = f"{table}.parquet"
    _copy_tree_or_file(src, partial / rel)
    return {"path": rel, "rows": sum(parquet_rows(f) for f in table_files(partial / rel))}


def _copy_tree_or_file(src: Path, dst: Path) -> None:
    """Copy a file or a Parquet dataset directory, skipping Spark's CRC and _SUCCESS markers."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    if src.is_dir():
        shutil.copytree(
            src, dst, ignore=shutil.ignore_patterns(".*", "_SUCCESS", "*.crc"), dirs_exist_ok=False
        )
    elif src.is_file():
        shutil.copy2(src, dst)
    else:
        raise StoreError(f"publish: stage output does not exist: {src}")
