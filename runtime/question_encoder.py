"""The question encoder a query service loads: the numpy BERT (no torch) where it runs the
store's model, else sentence-transformers. A module of its own because it chooses between
``runtime.encoder`` and ``runtime.numpy_bert``, and the second builds on the first.
"""

from __future__ import annotations

from collections.abc import Mapping

from runtime import numpy_bert
from runtime.encoder import EncoderError, SentenceEncoder, spec_model_dir

QUERY_BACKENDS = ("auto", "numpy", "torch")  # query.encoder_backend (runtime/config.py)


def query_encoder(spec: Mapping, backend: str = "auto", threads: int | None = None):
    """The question encoder of a store: ``runtime.numpy_bert.NumpyBertEncoder`` (no torch,
    ~4x less memory) when it runs the spec's model, else ``SentenceEncoder``.

    ``backend``: ``auto`` (numpy where supported), ``numpy`` (refuse otherwise, saying why) or
    ``torch`` (sentence-transformers). A supported model with an unreadable file raises; it
    does not fall back, because the torch path would fail on the same file. ``threads`` (None:
    left as they are) sets, for the whole process, the threads of the chosen path only: numpy's
    BLAS or torch's."""
    if backend not in QUERY_BACKENDS:
        raise EncoderError(f"query encoder backend {backend!r}: expected one of "
                           f"{', '.join(QUERY_BACKENDS)}")
    if backend != "torch":
        path = spec_model_dir(spec)
        reason = numpy_bert.unsupported_reason(path)
        if reason is None:
            encoder = numpy_bert.NumpyBertEncoder(path, spec)
            if threads:
                numpy_bert.limit_blas_threads(int(threads))
            return encoder
        if backend == "numpy":
            raise numpy_bert.UnsupportedModelError(reason)
    encoder = SentenceEncoder.from_spec(spec)
    if threads:  # torch's default (all cores) is ~15x slower per question on 2 shared cores
        import torch

        torch.set_num_threads(int(threads))
    return encoder
