"""The peak memory of one stage, for its record and the build report (``peak_rss_mb``).

A stage runs in the driver's process (``lokg build``: every stage in one process; the DAG: a
process per stage) and may start processes of its own (encoder workers, a Spark JVM, DuckDB's
threads are in-process). The process's own ``ru_maxrss`` is the peak of its whole life, not of
one stage, so ``PeakRss`` samples instead: a thread reads, every ``interval`` seconds while the
stage runs (and once at its start and end), the resident set of this process plus every
descendant alive at that moment (``psutil``), and keeps the largest sum.

Limits, as the figure's reader should know them:

* a peak shorter than ``interval`` (0.1 s) may be missed, and so may a child that starts and
  ends between two samples;
* RSS counts the pages a process maps from files (a memory-mapped ``.npy``, shared libraries)
  while they are resident, and pages shared between processes once per process: the sum is an
  upper bound on what the tree holds of the machine's memory;
* without psutil the figure is ``ru_maxrss`` of this process and of its waited-for children
  (their peaks summed, though not simultaneous), since the process started: an upper bound, exact
  for the first stage of a process (the DAG's one stage per process).
"""

from __future__ import annotations

import resource
import threading

INTERVAL_S = 0.1


class PeakRss:
    """``with PeakRss() as peak: ...`` then ``peak.mb``: the sampled peak in MiB."""

    def __init__(self, interval: float = INTERVAL_S) -> None:
        self.interval = interval
        self.bytes = 0
        self.method = "psutil"
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> PeakRss:
        try:
            import psutil
        except ImportError:
            self.method = "ru_maxrss"
            return self
        self._process = psutil.Process()
        self._sample()
        self._thread = threading.Thread(target=self._watch, name="peak-rss", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        if self._thread is None:
            self.bytes = _ru_maxrss_bytes()
            return
        self._stop.set()
        self._thread.join()
        self._sample()

    @property
    def mb(self) -> float:
        return round(self.bytes / (1 << 20), 1)

    def _watch(self) -> None:
        while not self._stop.wait(self.interval):
            self._sample()

    def _sample(self) -> None:
        import psutil

        total = 0
        try:
            processes = [self._process, *self._process.children(recursive=True)]
        except psutil.Error:
            return
        for process in processes:
            try:
                total += process.memory_info().rss
            except psutil.Error:  # ended between the listing and the reading
                continue
        self.bytes = max(self.bytes, total)


def _ru_maxrss_bytes() -> int:
    """ru_maxrss (KiB on Linux) of this process plus its waited-for children, in bytes."""
    return 1024 * sum(resource.getrusage(who).ru_maxrss
                      for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
