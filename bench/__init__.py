"""The benchmark scripts, each run as ``python -m bench.<name>`` from the repository's root;
what they share is in bench.common. Results and their commands: docs/BENCHMARKS.md."""
