"""Counter-based randomness of the synthetic KG: a splitmix64 hash of (stream, key) → uniform
[0, 1), so any entity's or slot's draw is recomputed on demand from its key alone."""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass

import numpy as np
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1, _M2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)


def stream_id(seed: int, *labels) -> np.uint64:
    """An independent stream id for one purpose (stable across processes and versions)."""
    digest = hashlib.blake2b(repr((seed, labels)).encode(), digest_size=8).digest()
    return np.uint64(int.from_bytes(digest, "little"))


def uniform(stream: np.uint64, keys: np.ndarray) -> np.ndarray:
    x = keys.astype(np.uint64) * _GOLDEN + stream
    x ^= x >> np.uint64(30)
    x *= _M1
    x ^= x >> np.uint64(27)
    x *= _M2
    x ^= x >> np.uint64(31)
    return (x >> np.uint64(11)).astype(np.float64) * (1.0 / 9007199254740992.0)


def zipf_rank(u: np.ndarray, n: int, a: float) -> np.ndarray:
    """Inverse CDF of the density ∝ (1 + x)^-a on [0, n), floored: rank 0 is the most popular."""
    if a == 1.0:
        x = np.power(n + 1.0, u) - 1.0
    else:
        c = (n + 1.0) ** (1.0 - a) - 1.0
        x = np.power(1.0 + u * c, 1.0 / (1.0 - a)) - 1.0
    return np.minimum(x.astype(np.int64), n - 1)


def coprime(n: int, start: int) -> int:
    m = start % n or 1
    while math.gcd(m, n) != 1:
        m += 1
    return m


@dataclass(frozen=True)
class Pool:
    """Objects of one type (optionally one id parity), ordered by a seeded affine permutation."""

    offset: int
    count: int
    stride: int
    phase: int
    mult: int
    add: int

    def to_global(self, rank: np.ndarray) -> np.ndarray:
        return self.offset + self.phase + self.stride * ((self.mult * rank + self.add) % self.count)

    def rank_of(self, local: np.ndarray) -> np.ndarray:
        inv = pow(self.mult, -1, self.count) if self.count > 1 else 0
        return (((local - self.phase) // self.stride - self.add) * inv) % self.count
