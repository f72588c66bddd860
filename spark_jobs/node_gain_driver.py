"""Stage ``node_gain`` on the driver: μ of every entity with numpy and Arrow, for
graphs up to ``node_gain.driver_max_triples`` — a small refresh then starts no Spark session
for it, full or partial.

μ is Spark's expression ``(1 + log1p(deg_in)) · in_relations / |R*|`` evaluated in the same
order on doubles; Spark's ``log1p`` is Java's ``StrictMath.log1p``, i.e. fdlibm's
``s_log1p.c``, which numpy's ``log1p`` (the C library's) differs from in the last bit for
some degrees. ``strict_log1p`` is fdlibm's algorithm for the arguments μ takes (non-negative
integers), so both paths write the same bits (tests/test_node_gain.py compares them on every
degree up to 2²⁰ and around the powers of two above).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from lokg.runtime.contract import TABLE_SCHEMAS

LN2_HI, LN2_LO = 6.93147180369123816490e-01, 1.90821492927058770002e-10
LP = (6.666666666666735130e-01, 3.999999999940941908e-01, 2.857142874366239149e-01,
      2.222219843214978396e-01, 1.818357216161805012e-01, 1.531383769920937332e-01,
      1.479819860511658591e-01)
EXACT_INTEGERS = 2 ** 53 - 1  # 1 + x is exact below this: fdlibm's correction term c is 0
#: The contract's node_gain with the counts not null, as Spark writes them (a left join filled
#: with 0): the same schema whichever path wrote a build, so a refresh's row-digest cut-off
#: (pipeline.refresh.same_rows) can match either
COUNTED = pa.schema([f.with_nullable(f.name == "id" or f.name == "mu")
                     for f in TABLE_SCHEMAS["node_gain"]])


def strict_log1p(degrees) -> np.ndarray:
    """fdlibm's log1p (Java's ``StrictMath.log1p``) of non-negative integers, elementwise."""
    x = np.asarray(degrees, np.int64)
    if len(x) and (x.min() < 0 or x.max() >= EXACT_INTEGERS):
        raise ValueError(f"strict_log1p: integers in [0, 2^53 - 1), not [{x.min()}, {x.max()}]")
    u = (x + 1).astype(np.float64)  # exact, so fdlibm's c = 1 - (u - x) is 0
    high = u.view(np.int64) >> 32
    k = (high >> 20) - 1023
    hu = high & 0x000FFFFF
    upper = hu >= 0x6A09E  # normalise u into [√2/2, √2): u/2 past √2
    k = (k + upper).astype(np.float64)
    top = np.where(upper, hu | 0x3FE00000, hu | 0x3FF00000)
    f = ((top << 32) | (u.view(np.int64) & 0xFFFFFFFF)).view(np.float64) - 1.0
    hu = np.where(upper, (0x00100000 - hu) >> 2, hu)
    hfsq = 0.5 * f * f
    s = f / (2.0 + f)
    z = s * s
    r = z * (LP[0] + z * (LP[1] + z * (LP[2] + z * (LP[3] + z * (LP[4] + z * (LP[5]
                                                                        + z * LP[6]))))))
    general = k * LN2_HI - ((hfsq - (s * (hfsq + r) + k * LN2_LO)) - f)
    near = k * LN2_HI - ((hfsq * (1.0 - 0.66666666666666666 * f) - k * LN2_LO) - f)  # |f|<2⁻²⁰
    exact = k * LN2_HI + k * LN2_LO  # u a power of two
    out = np.where(hu == 0, np.where(f == 0.0, exact, near), general)
    return np.where(x == 0, 0.0, out)


def mu_numpy(deg_in, in_relations, n_relations: int) -> np.ndarray:
    """μ bit for bit as ``node_gain._mu`` computes it in Spark."""
    return ((1.0 + strict_log1p(deg_in)) * np.asarray(in_relations, np.float64)
            / float(max(n_relations, 1)))


def gain_table(entity_ids: np.ndarray, counts, n_relations: int) -> pa.Table:
    """The node_gain table (contract schema, rows in id order) of ``entity_ids`` from their
    (deg_in, in_relations) arrays."""
    deg_in, labels = counts
    order = np.argsort(entity_ids, kind="stable")
    return pa.table({"id": entity_ids[order], "deg_in": deg_in[order],
                     "in_relations": labels[order],
                     "mu": mu_numpy(deg_in, labels, n_relations)[order]},
                    schema=COUNTED)
