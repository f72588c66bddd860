"""What the tests and the benchmarks share: toy stores and dumps, build options, the Spark
session, doubles of the reader and of an OpenAI-compatible server, a served runtime.

A thin layer over the product, shipped in the wheel like ``torch_geometric.testing``: pytest
and the heavy packages are imported where a helper uses them, never at import of this package.

- ``lokg.testing.fixtures``: the pytest fixtures (tests/conftest.py registers them)
- ``lokg.testing.stores``: the toy film store and minimal contract tables
- ``lokg.testing.family``: the toy family graph and its fitted relation-knowledge store
- ``lokg.testing.dumps``: golden N-Triples lines, a documents corpus, MetaQA files
- ``lokg.testing.stages``: toy inputs of single stages, the path-cache search settings
- ``lokg.testing.builds``: small build settings, spark-submit of a stage, asking a store
- ``lokg.testing.doubles``: reader doubles and a routed answer
- ``lokg.testing.http_fakes``: a scripted OpenAI-compatible HTTP server
- ``lokg.testing.serving``: the HTTP service on loopback and its client, a free port
- ``lokg.testing.s3``: an S3-protocol server on loopback (moto)
- ``lokg.testing.cli``: a clean refusal, a subprocess without the heavy packages
"""

from __future__ import annotations

import os
from pathlib import Path

#: The checkout this package lives in (lokg/ sits at the repository's top).
REPO = Path(__file__).resolve().parents[2]
#: The optional shared benchmark data: $LOKG_SHARED_DATA, else ../shared/data beside the checkout.
SHARED_DATA = Path(os.environ.get("LOKG_SHARED_DATA", REPO.parent / "shared" / "data"))
