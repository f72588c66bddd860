"""Stores on object storage (``s3://bucket/prefix``, AWS or any S3-compatible endpoint).

Same layout as a local store (runtime/contract/), as objects. Builds are always assembled on
a local disk; this module publishes a complete local build to the object store and brings the
published one back into a verified local cache that the runtime memory-maps as before.

* **Transfers** go through pyarrow's ``S3FileSystem``; the few calls that need an ETag or a
  conditional header (``CURRENT``, the manifest) through botocore, which pyarrow cannot send.
* **Publish**: every build file under ``builds/<id>/``, the manifest last and only if absent
  (``If-None-Match: *``), then ``CURRENT`` with ``If-Match`` on the ETag read before the upload
  (``If-None-Match: *`` on an empty store). A reader never follows CURRENT to a build whose
  manifest is missing; of two publishers racing, the second swap gets 412 and is refused,
  naming both builds. This needs an endpoint with conditional writes (AWS S3 since 2024,
  MinIO, moto); no lease fallback is implemented.
* **Pins as objects**: ``pins/<id>/<host>-<pid>-<token>``, rewritten every heartbeat by the
  process holding them (runtime/pins.py), live for :data:`runtime.pins.PIN_TTL_S` after the last.
  Retention writes ``builds/<id>/.doomed`` first and reads the pins after it (as on a local
  store); publish and rollback pin their build before making it CURRENT, so retention run by
  another host never deletes it under them.
* **The cache**: ``<cache>/builds/<id>/`` is a local store's build, downloaded into a hidden
  directory with every object's sha256 checked against the manifest, renamed into place,
  reused while intact, and evicted oldest first (unpinned builds only) above the size cap.

Configuration (environment): endpoint ``LOKG_S3_ENDPOINT`` (else ``AWS_ENDPOINT_URL_S3`` /
``AWS_ENDPOINT_URL``; unset: AWS), region ``AWS_REGION`` / ``AWS_DEFAULT_REGION``, credentials
the usual AWS chain (``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY`` / ``AWS_PROFILE``),
``LOKG_S3_TIMEOUT`` seconds per request, ``LOKG_CACHE_DIR`` and ``LOKG_CACHE_MAX_GB``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import secrets
import shutil
import time
from contextlib import contextmanager
from pathlib import Path

import pyarrow.fs as pafs

from lokg.runtime import pins
from lokg.runtime.contract import (BUILDS_DIR, CURRENT_FILE, DOOMED_FILE, MANIFEST_FILE,
                              PARTIAL_PREFIX, Build, Store, StoreError, write_atomic,
                              check_build_id, check_keep, check_required_tables, is_url,
                              parse_manifest, verify_build)

ENDPOINT_ENV = "LOKG_S3_ENDPOINT"
TIMEOUT_ENV = "LOKG_S3_TIMEOUT"
CACHE_ENV = "LOKG_CACHE_DIR"
CACHE_CAP_ENV = "LOKG_CACHE_MAX_GB"
DEFAULT_TIMEOUT_S = 10.0
DEFAULT_CACHE_GB = 20.0
#: A cache directory left by a killed download is removed after this long.
STALE_DOWNLOAD_S = 3600.0
#: How long a publisher waits for a tombstone on its own upload to go: a retention run that
#: sees the publisher's pin withdraws it within a few requests (see :meth:`_check_uploaded`).
TOMBSTONE_SETTLE_S = 10.0
_TOMBSTONE_POLL_S = 0.2
_CHUNK = 1 << 20
log = logging.getLogger("lokg.object_store")
#: Stores whose failed pin write was logged (a read-only replica logs it once per process).
_unpinned_logged: set[str] = set()


def open_store(root: str | os.PathLike) -> Store | RemoteStore:
    """The store at ``root``: a :class:`Store` for a local path, a :class:`RemoteStore` for an
    ``s3://`` URL (the same reading, rollback and retention methods)."""
    return RemoteStore(root) if is_url(root) else Store(root)


class UrlPath(str):
    """An object's URL that joins like a Path (``url / "builds"``), for messages and Build.path."""

    def __truediv__(self, other) -> UrlPath:
        return UrlPath(f"{self.rstrip('/')}/{other}")


def _env_float(name: str, default: float) -> float:
    raw = os.environ.get(name)
    try:
        return float(raw) if raw else default
    except ValueError:
        raise StoreError(f"{name}={raw!r}: expected a number") from None


def _require_boto3(url: str) -> None:
    """Fail up front, naming the extra to install, where boto3 is missing: it is optional (the
    demo's set-up skips it) and would otherwise surface as an ImportError mid-transfer."""
    try:
        import boto3  # noqa: F401
    except ImportError:
        raise StoreError(f"{url}: s3:// stores need boto3, which is not installed: "
                         f"pip install 'lokg[s3]' (or, in a checkout, bash infra/setup.sh "
                         f"--extras)") from None


class Bucket:
    """One ``s3://bucket/prefix``: object reads and writes relative to the prefix; every
    failure is a StoreError naming the object's URL."""

    def __init__(self, url: str):
        if not url.startswith("s3://") or not url[5:].strip("/"):
            raise StoreError(f"{url}: unsupported store URL (expected s3://bucket[/prefix])")
        _require_boto3(url)
        self.bucket, _, prefix = url[5:].partition("/")
        self.prefix = prefix.strip("/") + "/" if prefix.strip("/") else ""
        self.url = UrlPath(f"s3://{self.bucket}/{self.prefix}".rstrip("/"))
        self.endpoint = (os.environ.get(ENDPOINT_ENV) or os.environ.get("AWS_ENDPOINT_URL_S3")
                         or os.environ.get("AWS_ENDPOINT_URL") or None)
        self.region = (os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
                       or "us-east-1")
        self.timeout = _env_float(TIMEOUT_ENV, DEFAULT_TIMEOUT_S)
        self.fs = pafs.S3FileSystem(
            endpoint_override=self.endpoint, region=self.region,
            connect_timeout=min(self.timeout, 5.0), request_timeout=self.timeout,
            retry_strategy=pafs.AwsStandardS3RetryStrategy(max_attempts=2))
        self._client = None

    def key(self, rel: str) -> str:
        return self.prefix + rel

    def path(self, rel: str) -> str:
        return f"{self.bucket}/{self.key(rel)}"

    @contextmanager
    def errors(self, rel: str, what: str):
        """Turn pyarrow's OSError and botocore's errors into a StoreError naming the object."""
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            yield
        except (OSError, BotoCoreError, ClientError) as exc:
            raise StoreError(f"{self.url / rel}: {what} failed ({exc}); endpoint "
                             f"{self.endpoint or 'AWS'}, region {self.region}") from None

    @property
    def client(self):
        """botocore's S3 client, for the calls pyarrow lacks (ETags, conditional writes)."""
        if self._client is None:
            import boto3
            from botocore.config import Config

            config = Config(connect_timeout=min(self.timeout, 5.0), read_timeout=self.timeout,
                            retries={"max_attempts": 2, "mode": "standard"})
            self._client = boto3.client("s3", endpoint_url=self.endpoint,
                                        region_name=self.region, config=config)
        return self._client

    def read(self, rel: str) -> bytes | None:
        """An object's bytes; None when there is no such object."""
        with self.errors(rel, "read"):
            try:
                with self.fs.open_input_stream(self.path(rel)) as fh:
                    return fh.read()
            except FileNotFoundError:
                return None

    def read_etag(self, rel: str) -> tuple[bytes | None, str | None]:
        """An object's bytes and ETag (None, None when absent), for a later conditional write."""
        with self.errors(rel, "read"):
            try:
                got = self.client.get_object(Bucket=self.bucket, Key=self.key(rel))
            except self.client.exceptions.NoSuchKey:
                return None, None
            return got["Body"].read(), got["ETag"]

    def put(self, rel: str, data: bytes, *, if_match: str | None = None,
            if_absent: bool = False) -> bool:
        """Write a small object; with a condition, False when the condition failed (412)."""
        from botocore.exceptions import ClientError

        extra = {"IfMatch": if_match} if if_match else {"IfNoneMatch": "*"} if if_absent else {}
        with self.errors(rel, "write"):
            try:
                self.client.put_object(Bucket=self.bucket, Key=self.key(rel), Body=data, **extra)
            except ClientError as exc:
                if extra and exc.response.get("Error", {}).get("Code") in (
                        "PreconditionFailed", "ConditionalRequestConflict"):
                    return False
                raise
        return True

    def upload(self, local: Path, rel: str) -> None:
        with self.errors(rel, "upload"), open(local, "rb") as src, \
                self.fs.open_output_stream(self.path(rel)) as dst:
            while block := src.read(_CHUNK):
                dst.write(block)

    def download(self, rel: str, local: Path, sha256: str, size: int) -> None:
        """Download one object, refusing it (naming it) unless size and sha256 match."""
        digest, got = hashlib.sha256(), 0
        with self.errors(rel, "download"), self.fs.open_input_stream(self.path(rel)) as src, \
                open(local, "wb") as dst:
            while block := src.read(_CHUNK):
                digest.update(block)
                got += len(block)
                dst.write(block)
        if got != size or digest.hexdigest() != sha256:
            raise StoreError(f"{self.url / rel}: {'size ' + str(got) if got != size else 'sha256'}"
                             f" differs from the manifest — object corrupted or replaced")

    def sha256(self, rel: str) -> tuple[str, int]:
        digest, got = hashlib.sha256(), 0
        with self.errors(rel, "read"), self.fs.open_input_stream(self.path(rel)) as src:
            while block := src.read(_CHUNK):
                digest.update(block)
                got += len(block)
        return digest.hexdigest(), got

    def listing(self, rel: str, recursive: bool = False) -> list[pafs.FileInfo]:
        """The objects (and, not recursive, the "directories") under ``rel``/."""
        selector = pafs.FileSelector(self.path(rel), allow_not_found=True, recursive=recursive)
        with self.errors(rel, "list"):
            return self.fs.get_file_info(selector)

    def delete(self, rel: str) -> None:
        """Delete one object (botocore: pin releases run at exit, after pyarrow's S3 shutdown)."""
        with self.errors(rel, "delete"):
            self.client.delete_object(Bucket=self.bucket, Key=self.key(rel))

    def delete_dir(self, rel: str) -> None:
        with self.errors(rel, "delete"):
            try:
                self.fs.delete_dir(self.path(rel))
            except FileNotFoundError:
                pass

    def name(self, info: pafs.FileInfo, under: str) -> str:
        """``info``'s path relative to ``under``/."""
        return info.path[len(self.path(under)) + 1:]


class ObjectPin:
    """A reader's pin as an object, refreshed by runtime/pins.py's heartbeat."""

    def __init__(self, bucket: Bucket, build_id: str):
        self.bucket = bucket
        self.rel = f"{pins.PINS_DIR}/{build_id}/{pins.pin_name()}"
        bucket.put(self.rel, b"")
        pins.hold(self, lambda: bucket.put(self.rel, b""))

    def release(self) -> None:
        """Remove the pin (idempotent; a failure only leaves it to expire)."""
        pins.drop(self)
        try:
            self.bucket.delete(self.rel)
        except StoreError:
            pass


def release(*held) -> None:
    """Release local pins (paths) and object pins alike."""
    for handle in held:
        if isinstance(handle, ObjectPin):
            handle.release()
        else:
            pins.release(handle)


class RemoteStore:
    """A store on object storage: the methods of :class:`runtime.contract.Store` that make
    sense there, plus :meth:`sync` into a local cache (see the module doc)."""

    def __init__(self, url: str):
        self.bucket = Bucket(url)
        self.root = self.bucket.url

    # -- reading
    def current(self) -> tuple[str | None, str | None]:
        """The build id CURRENT names and CURRENT's ETag; (None, None) on an empty store."""
        data, etag = self.bucket.read_etag(CURRENT_FILE)
        if data is None:
            return None, None
        where = self.root / CURRENT_FILE
        try:
            build_id = data.decode("utf-8").strip()
        except UnicodeDecodeError:
            raise StoreError(f"{where}: CURRENT pointer is not UTF-8 text") from None
        if not build_id:
            raise StoreError(f"{where}: empty CURRENT pointer")
        return check_build_id(build_id, where), etag

    def current_id(self) -> str | None:
        return self.current()[0]

    def build_ids(self) -> list[str]:
        """Ids of complete builds (a manifest and no tombstone), oldest first."""
        dirs = [self.bucket.name(i, BUILDS_DIR) for i in self.bucket.listing(BUILDS_DIR)
                if i.type == pafs.FileType.Directory]
        return sorted(b for b in dirs if not b.startswith(".") and self._complete(b))

    def _complete(self, build_id: str) -> bool:
        names = {self.bucket.name(i, f"{BUILDS_DIR}/{build_id}")
                 for i in self.bucket.listing(f"{BUILDS_DIR}/{build_id}")}
        return MANIFEST_FILE in names and DOOMED_FILE not in names

    def build(self, build_id: str | None = None, *, verify: bool = False) -> Build:
        """A published build's manifest (default: CURRENT's); ``verify`` hashes every object."""
        if build_id is None:
            build_id = self.current_id()
            if build_id is None:
                raise StoreError(f"{self.root / CURRENT_FILE}: no published build in this store")
        rel = f"{BUILDS_DIR}/{check_build_id(build_id)}"
        data = self.bucket.read(f"{rel}/{MANIFEST_FILE}")
        if data is None or self.bucket.read(f"{rel}/{DOOMED_FILE}") is not None:
            raise StoreError(f"{self.root / rel}: build '{build_id}' does not exist")
        build = Build(self.root, build_id, parse_manifest(data, self.root / rel / MANIFEST_FILE))
        check_required_tables(build)
        if verify:
            for name, entry in sorted(build.manifest.get("files", {}).items()):
                if self.bucket.sha256(f"{rel}/{name}") != (entry["sha256"], entry["bytes"]):
                    raise StoreError(f"{self.root / rel / name}: size or sha256 differs from "
                                     "the manifest — object corrupted or replaced")
        return build

    def pin(self, build_id: str, *, required: bool = True) -> ObjectPin | None:
        """Pin a published build against retention (any host); refused if it is being deleted.
        Not ``required`` (a read-only replica): a pin that cannot be written gives None, logged
        once per store and process, and the build is read unpinned (docs/OPERATIONS.md)."""
        try:
            held = ObjectPin(self.bucket, check_build_id(build_id))
        except StoreError as exc:
            if required:
                raise
            if self.root not in _unpinned_logged:
                _unpinned_logged.add(str(self.root))
                log.warning("pins off: cannot write a pin in %s (%s); reading builds unpinned, "
                            "so retention may delete one while it is served", self.root, exc)
            held = None
        if not self._complete(build_id):
            release(held)
            raise StoreError(f"{self.root / BUILDS_DIR / build_id}: build '{build_id}' does "
                             "not exist")
        return held

    # -- writing
    def publish(self, build: Build, *, keep: int = 3, expect_current: str | None | object = ...,
                hook=None) -> Build:
        """Upload a complete local build and make it CURRENT (see the module doc for why
        this order and these conditions). ``hook(step)`` runs after each step (fault tests).

        Refused: a local build that does not verify, an id already published with other
        content, and a CURRENT that moved since this call read it (or from ``expect_current``).
        """
        hook = hook or (lambda step: None)
        check_keep(keep)
        verify_build(build)
        current, etag = self.current()
        expected = current if expect_current is ... else expect_current
        if current != expected:
            raise StoreError(f"publish of {build.build_id} to {self.root} refused: CURRENT is "
                             f"{current}, not {expected}")
        held = ObjectPin(self.bucket, build.build_id)  # no retention deletes it meanwhile
        try:
            self._upload(build, hook)
            self._check_uploaded(build)
            if not self.bucket.put(CURRENT_FILE, f"{build.build_id}\n".encode(),
                                   if_match=etag, if_absent=etag is None):
                raise StoreError(f"publish of {build.build_id} to {self.root} refused: CURRENT "
                                 f"moved from {current} to {self.current_id()} during the "
                                 "upload; publish again to replace it")
            hook("current")
            self._retain(keep)
        finally:
            held.release()
        return Build(self.root, build.build_id, build.manifest)

    def _upload(self, build: Build, hook) -> None:
        """Every file, then the manifest if no other publisher wrote one for this id; a build
        already there must be this one."""
        rel = f"{BUILDS_DIR}/{build.build_id}"
        if self.bucket.read(f"{rel}/{MANIFEST_FILE}") is None:
            for name in sorted(build.manifest["files"]):
                self.bucket.upload(build.path / name, f"{rel}/{name}")
                hook(f"uploaded {name}")
            manifest = (build.path / MANIFEST_FILE).read_bytes()
            if self.bucket.put(f"{rel}/{MANIFEST_FILE}", manifest, if_absent=True):
                hook("manifest")
                return
        published = self.build(build.build_id, verify=True).manifest
        if (published["tables"], published["files"]) != (build.manifest["tables"],
                                                         build.manifest["files"]):
            raise StoreError(f"{self.root / rel}: build already published with different "
                             "content; refusing to publish over it")
        hook("manifest")

    def _check_uploaded(self, build: Build) -> None:
        """Every file of ``build`` and its manifest are there with their sizes and no
        retention run is deleting it: what a run that started before this publisher pinned
        it could have removed.

        A tombstone over a complete upload is ambiguous: a run that read the pins after this
        publisher wrote its pin (another publisher's, racing this one) withdraws it, one that
        read them before goes on to delete, manifest first. So wait up to
        :data:`TOMBSTONE_SETTLE_S` for the tombstone to go while the manifest stays."""
        rel = f"{BUILDS_DIR}/{build.build_id}"
        deadline = time.monotonic() + TOMBSTONE_SETTLE_S
        while True:
            sizes = {self.bucket.name(i, rel): i.size for i in self.bucket.listing(rel, True)}
            bad = sorted(n for n, e in build.manifest["files"].items()
                         if sizes.get(n) != e["bytes"])
            if MANIFEST_FILE not in sizes:
                bad.append(MANIFEST_FILE)
            if DOOMED_FILE not in sizes and not bad:
                return
            if bad or time.monotonic() > deadline:
                raise StoreError(f"{self.root / rel}: publish refused, retention deleted "
                                 f"{', '.join(bad[:5]) or 'it'} during the upload; publish "
                                 "again")
            time.sleep(_TOMBSTONE_POLL_S)

    def rollback(self, build_id: str) -> Build:
        """Point CURRENT at an older published build after hashing every object of it; the
        pin keeps retention elsewhere from deleting it before the swap."""
        held = self.pin(build_id)
        try:
            build = self.build(build_id, verify=True)
            _, etag = self.current()
            if not self.bucket.put(CURRENT_FILE, f"{build_id}\n".encode(), if_match=etag,
                                   if_absent=etag is None):
                raise StoreError(f"rollback to {build_id} refused: CURRENT moved meanwhile")
        finally:
            held.release()
        return build

    def collect_garbage(self, keep: int = 3) -> list[str]:
        return self._retain(check_keep(keep))

    def collect_staging(self, older_than_s: float, *, now: float | None = None) -> list[str]:
        """Nothing to collect: staging is always local (builds are assembled on a disk)."""
        return []

    def _retain(self, keep: int) -> list[str]:
        """Delete published builds beyond the newest ``keep`` previous ones and abandoned
        uploads (no manifest, no live pin); CURRENT and pinned builds stay."""
        current = self.current_id()
        others = [b for b in self.build_ids() if b != current]
        doomed = [b for b in others[: max(0, len(others) - keep)] if self._delete_unpinned(b)]
        for info in self.bucket.listing(BUILDS_DIR):
            build_id = self.bucket.name(info, BUILDS_DIR)
            if info.type == pafs.FileType.Directory and build_id != current \
                    and not self.bucket.read(f"{BUILDS_DIR}/{build_id}/{MANIFEST_FILE}"):
                self._delete_unpinned(build_id)
        return doomed

    def _live_pins(self, build_id: str) -> list[str]:
        """Live pins on ``build_id``; expired ones are deleted."""
        now, live = time.time(), []
        for info in self.bucket.listing(f"{pins.PINS_DIR}/{build_id}"):
            name = self.bucket.name(info, f"{pins.PINS_DIR}/{build_id}")
            if pins.is_live(name, lambda: info.mtime.timestamp(), now):
                live.append(name)
            else:
                self.bucket.delete(f"{pins.PINS_DIR}/{build_id}/{name}")
        return live

    def _delete_unpinned(self, build_id: str) -> bool:
        """Tombstone, then pins (a concurrent pinner sees one or the other), then the objects:
        the manifest first, so nothing lists a build losing its files."""
        rel = f"{BUILDS_DIR}/{build_id}"
        self.bucket.put(f"{rel}/{DOOMED_FILE}", b"")
        if self._live_pins(build_id):
            self.bucket.delete(f"{rel}/{DOOMED_FILE}")
            return False
        if self.bucket.read(f"{rel}/{MANIFEST_FILE}") is not None:
            self.bucket.delete(f"{rel}/{MANIFEST_FILE}")
        self.bucket.delete_dir(rel)
        self.bucket.delete_dir(f"{pins.PINS_DIR}/{build_id}")
        return True

    # -- the local cache
    def sync(self, build_id: str | None = None, *, cache_dir: str | Path | None = None,
             verify: bool = True, cap_bytes: int | None = -1,
             pins_required: bool = True) -> tuple[Store, str, list]:
        """Bring a published build (default: CURRENT's) into the local cache and pin it there
        and here. Returns the cache as a local Store, the build id and the pins to release.

        A cached copy is reused when it verifies (``verify``: every sha256, else sizes); one
        that does not is downloaded again. Then builds beyond ``cap_bytes`` (-1: the
        configured cap; None: no cap) are evicted, oldest first, unless in use. Without
        ``pins_required`` a pin that cannot be written leaves None in the pins (see :meth:`pin`).
        """
        wanted = build_id if build_id is not None else self.build().build_id
        remote_pin = self.pin(wanted, required=pins_required)
        try:
            manifest = self.build(wanted).manifest
            cache = Store(cache_root(self.root) if cache_dir is None else cache_dir)
            cache.builds_dir.mkdir(parents=True, exist_ok=True)
            self._fetch(cache, Build(cache.root, wanted, manifest), verify)
            local_pin = cache.pin(wanted)
            evict(cache, cache_cap() if cap_bytes == -1 else cap_bytes)
        except BaseException:
            release(remote_pin)
            raise
        return cache, wanted, [local_pin, remote_pin]

    def pull(self, local_dir: str | Path, build_id: str | None = None) -> str:
        """A published build into ``local_dir`` as a local store whose CURRENT names it."""
        cache, pulled, held = self.sync(build_id, cache_dir=local_dir, cap_bytes=None)
        release(*held)
        write_atomic(cache.root / CURRENT_FILE, pulled + "\n")
        return pulled

    def _fetch(self, cache: Store, build: Build, verify: bool) -> None:
        """``build`` into ``cache`` unless an intact copy is there: every object downloaded and
        checked into a hidden directory, the manifest last, then renamed into place."""
        if (build.path / MANIFEST_FILE).is_file():
            try:
                verify_build(build, checksums=verify)
                return
            except StoreError:  # damaged or partly evicted copy: replaced below
                _discard(build.path)
        partial = cache.builds_dir / f"{PARTIAL_PREFIX}{build.build_id}-{secrets.token_hex(4)}"
        rel = f"{BUILDS_DIR}/{build.build_id}"
        try:
            for name, entry in sorted(build.manifest["files"].items()):
                (partial / name).parent.mkdir(parents=True, exist_ok=True)
                self.bucket.download(f"{rel}/{name}", partial / name, entry["sha256"],
                                     entry["bytes"])
            write_atomic(partial / MANIFEST_FILE, json.dumps(build.manifest, indent=2,
                                                               sort_keys=True))
            verify_build(Build(cache.root, partial.name, build.manifest), checksums=False)
            os.rename(partial, build.path)
        except OSError:  # another process put the same build in place first
            if not (build.path / MANIFEST_FILE).is_file():
                raise
        finally:
            shutil.rmtree(partial, ignore_errors=True)


def _discard(path: Path) -> None:
    gone = path.with_name(f"{PARTIAL_PREFIX}{path.name}.deleted-{secrets.token_hex(4)}")
    os.rename(path, gone)
    shutil.rmtree(gone, ignore_errors=True)


def cache_root(url: str) -> Path:
    """The cache of store ``url``: ``$LOKG_CACHE_DIR/<hash>`` (default ``~/.cache/lokg/stores``)."""
    base = os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "lokg" / "stores"
    return Path(base) / hashlib.sha256(url.encode()).hexdigest()[:16]


def cache_cap() -> int:
    return int(_env_float(CACHE_CAP_ENV, DEFAULT_CACHE_GB) * 1e9)


def _size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def evict(cache: Store, cap_bytes: int | None) -> list[str]:
    """Delete cached builds, least recently fetched first, while the cache exceeds
    ``cap_bytes``; builds a process has open (local pins) stay. Old killed downloads go."""
    if cap_bytes is None:
        return []
    with cache.locked("cache eviction"):
        now = time.time()
        for stale in cache.builds_dir.glob(f"{PARTIAL_PREFIX}*"):
            if now - stale.stat().st_mtime > STALE_DOWNLOAD_S:
                shutil.rmtree(stale, ignore_errors=True)
        ids = sorted(cache.build_ids(),
                     key=lambda b: (cache.builds_dir / b / MANIFEST_FILE).stat().st_mtime)
        sizes = {b: _size(cache.builds_dir / b) for b in ids}
        total, evicted = sum(sizes.values()), []
        for build_id in ids:
            if total <= cap_bytes:
                break
            if cache._delete_unpinned(build_id):
                total -= sizes[build_id]
                evicted.append(build_id)
        return evicted
