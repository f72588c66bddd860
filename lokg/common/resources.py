"""What one build may use of its machine: the memory budget every stage honours and the threads
it runs on (``build`` section). Declared below the stages, which all read it."""

from __future__ import annotations

from dataclasses import dataclass

from lokg.runtime.settings import THREADS, Settings, number, setting


@dataclass(frozen=True)
class BuildSettings(Settings, section="build"):
    """The resources of one build's stages, whatever the dump's size."""

    memory_gb: float = setting(12.0, number(0.25),
            "peak memory a stage may use, in GB (default: half of a 24 GB node); the SQL engine "
            "spills past it and the learned stages size their blocks by it")
    threads: int | None = setting(None, THREADS,
            "threads of the SQL engine and the stages' own pools (null: every core)")
