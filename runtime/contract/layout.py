"""The store's layout: its file and directory names, build ids, and the error of the contract."""

from __future__ import annotations

import datetime as _dt
import re
import secrets

from lokg.runtime.errors import LokgError

SCHEMA_VERSION = 1
KNOWN_SCHEMA_VERSIONS = frozenset({1})

CURRENT_FILE = "CURRENT"
MANIFEST_FILE = "manifest.json"
BUILDS_DIR = "builds"
STAGING_DIR = "staging"
REFRESH_DIR = "refresh"
PARTIAL_PREFIX = ".partial-"
LOCK_FILE = ".publish.lock"
#: Held by one build (``lokg build``, ``lokg publish``) from its start to its end (lease.py).
BUILD_LEASE_FILE = ".build.lease"
#: Written into a build by retention before it deletes it: a reader that pins the build after
#: retention looked at the pins sees it and refuses the build instead of losing files mid-read.
DOOMED_FILE = ".doomed"
#: A build id: a file name that cannot be a path ("..", "/") or hidden; new_build_id's fit.
BUILD_ID_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
#: How long a publish, rollback or retention run waits for another one to finish.
LOCK_TIMEOUT_S = 600.0


class StoreError(LokgError):
    """A store, build or file violates the contract. The message names the offending path."""


def new_build_id(now: _dt.datetime | None = None) -> str:
    """Sortable, unique build id: UTC timestamp plus random suffix."""
    now = now or _dt.datetime.now(_dt.timezone.utc)
    return now.strftime("%Y%m%dT%H%M%SZ") + "-" + secrets.token_hex(3)


def check_build_id(build_id: str, where: str = "build id") -> str:
    """Refuse anything but a plain build id (a path would point CURRENT outside the store)."""
    if not isinstance(build_id, str) or not BUILD_ID_PATTERN.fullmatch(build_id):
        raise StoreError(f"{where}: {build_id!r} is not a build id (letters, digits, '.', '_', "
                         f"'-'; no path)")
    return build_id


def is_url(root) -> bool:
    """A store root given as a URL (``s3://bucket/prefix``) rather than a local path."""
    return isinstance(root, str) and "://" in root
