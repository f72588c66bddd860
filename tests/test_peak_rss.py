"""pipeline/peak_rss.py: a stage's peak RSS, its own process's and its children's."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("psutil")

from lokg.pipeline.peak_rss import PeakRss  # noqa: E402

HOLD_MB = 200


def test_the_peak_counts_memory_held_briefly_in_the_process():
    with PeakRss() as before:
        pass
    with PeakRss(interval=0.01) as peak:
        block = np.ones(HOLD_MB << 20, np.uint8)  # touched: resident
        block.sum()
        del block
    assert peak.method == "psutil"
    assert peak.mb >= before.mb + 0.8 * HOLD_MB


def test_the_peak_counts_a_child_process():
    code = (f"import numpy as np, time; b = np.ones({HOLD_MB} << 20, np.uint8); b.sum(); "
            "print('held', flush=True); time.sleep(0.5)")
    with PeakRss(interval=0.02) as peak:
        subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)
    with PeakRss() as alone:
        pass
    assert peak.mb >= alone.mb + 0.8 * HOLD_MB
