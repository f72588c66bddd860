"""The wheel installs one top-level package, ``lokg``, with every subpackage and data file the
repository's top folders hold."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SOURCE_FOLDERS = ("lokg", "runtime", "pipeline", "spark_jobs", "training", "text", "evaluation")


def test_the_wheel_holds_lokg_and_nothing_else_at_top_level(tmp_path):
    source = tmp_path / "src"
    source.mkdir()
    for name in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copy(REPO / name, source / name)
    for folder in SOURCE_FOLDERS:
        shutil.copytree(REPO / folder, source / folder,
                        ignore=shutil.ignore_patterns("__pycache__"))
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps",
                           "--no-build-isolation", "-w", str(tmp_path / "dist"), str(source)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    (wheel,) = (tmp_path / "dist").glob("lokg-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")} == {"lokg"}
    for module in (REPO / "lokg").rglob("*.py"):  # the namespace's own modules and subpackages
        assert module.relative_to(REPO).as_posix() in names, module
    for folder in SOURCE_FOLDERS[1:]:
        for module in (REPO / folder).rglob("*.py"):
            assert f"lokg/{module.relative_to(REPO).as_posix()}" in names, module
    assert "lokg/runtime/web/index.html" in names
    assert "lokg/spark_jobs/conf/log4j2.properties" in names
