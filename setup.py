"""The wheel installs one top-level package, ``lokg``: each folder of the repository's top
(``runtime/``, ``pipeline/``, ...) is mapped to ``lokg.<folder>``. Everything else is in
pyproject.toml; this file only lists the packages, found on disk so a new one cannot be left out."""

from setuptools import find_packages, setup

FOLDERS = ("runtime", "pipeline", "spark_jobs", "training", "text", "evaluation")
SUBPACKAGES = find_packages(include=[f"{folder}*" for folder in FOLDERS])

setup(
    packages=[*find_packages(include=["lokg", "lokg.*"]),
              *(f"lokg.{name}" for name in SUBPACKAGES)],
    package_dir={"lokg": "lokg", **{f"lokg.{folder}": folder for folder in FOLDERS}},
)
