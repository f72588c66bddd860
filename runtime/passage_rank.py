"""Graph-guided passage ranking: Personalized PageRank over passages and entities.

A store built from documents holds, per chunk, the triples extracted from it
(``triple_sources``, read by runtime/provenance.py). Here every chunk is a node beside the
entities, tied to each entity a triple sourced in it names, and entities are tied to each other
by those triples (undirected, unweighted: the extractor's relation phrase is not trusted to
orient a walk). A question seeds the walk with the entities it links and the passages nearest
it by the store's encoder (their dense scores); the passages' stationary mass ranks them
(HippoRAG 2's recipe without its synonym edges or fact reranking). A passage that names both a
linked entity and a bridge the other hop passes through collects mass from both, which is how
the graph can find the second hop's passage that the question's wording alone does not reach.

The transition matrix is built once per opened build, on the first question that asks for a
ranking (scipy.sparse, CSR; a runtime dependency since this module), and every ranking is a
power iteration of sparse products: no graph library, no per-question setup beyond the seed
vector.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

Triple = tuple[int, int, int]
#: Share of a restart that goes back to a node (HippoRAG's damping 0.5: mass stays near seeds).
DAMPING = 0.5
#: Power iterations at most; the walk stops earlier when an iteration moves < TOLERANCE (L1).
ITERATIONS = 30
TOLERANCE = 1e-5
#: Passages nearest the question by dense score that seed the walk.
DENSE_SEEDS = 20
#: Share of the seed mass given to the dense passages when entities are linked too.
DENSE_SHARE = 0.5


class PassageGraph:
    """The entity–passage graph of a build (module docstring). Node ids: entities ``0..n_e-1``,
    then passage ``i`` at ``n_e + i``."""

    def __init__(self, passages: Sequence[Iterable[Triple]], n_entities: int):
        from scipy import sparse

        self.n_entities, self.n_passages = n_entities, len(passages)
        n = n_entities + self.n_passages
        rows, cols = [], []
        for i, triples in enumerate(passages):
            node = n_entities + i
            for s, _, o in triples:
                for e in (s, o):
                    rows.append(node)
                    cols.append(e)
                if s != o:
                    rows.append(s)
                    cols.append(o)
        r, c = np.asarray(rows, np.int64), np.asarray(cols, np.int64)
        adjacency = sparse.coo_matrix((np.ones(2 * len(r)), (np.r_[r, c], np.r_[c, r])),
                                      shape=(n, n)).tocsr()
        adjacency.data[:] = 1.0  # duplicates summed by tocsr: an edge counts once
        degree = np.asarray(adjacency.sum(axis=0)).ravel()
        self.dangling = np.flatnonzero(degree == 0)
        inverse = np.divide(1.0, degree, out=np.zeros(n), where=degree > 0)
        # column-stochastic: column j spreads node j's mass evenly over its neighbours; float32
        # halves what each product reads, and a ranking needs no more digits
        self.transition = (adjacency @ sparse.diags(inverse)).tocsr().astype(np.float32)
        self.transition.sort_indices()

    def seeds(self, entities: Sequence[int], dense: np.ndarray | None) -> np.ndarray | None:
        """The restart vector: linked entities evenly, and the ``DENSE_SEEDS`` passages with the
        best dense scores in proportion to how far each is above the worst of them (the dense
        share is everything when nothing links, nothing when there are no scores)."""
        n = self.n_entities + self.n_passages
        seed = np.zeros(n, np.float32)
        known = [e for e in dict.fromkeys(entities) if 0 <= e < self.n_entities]
        dense_share = 0.0
        if dense is not None and len(dense) == self.n_passages and self.n_passages:
            top = _best(dense, DENSE_SEEDS)
            weight = dense[top] - dense[top[-1]] + 1e-3
            seed[self.n_entities + top] = weight / weight.sum()
            dense_share = DENSE_SHARE if known else 1.0
        if known:
            seed[:] *= dense_share
            seed[known] += (1.0 - dense_share) / len(known)
        total = seed.sum()
        return seed / total if total > 0 else None

    def rank(self, entities: Sequence[int], dense: np.ndarray | None = None
             ) -> np.ndarray | None:
        """Every passage's PageRank mass personalized to the question's seeds (None: no seed).
        Mass that reaches a node with no edge restarts from the seeds, so it is not lost."""
        seed = self.seeds(entities, dense)
        if seed is None:
            return None
        p, restart = seed.copy(), (1.0 - DAMPING) * seed
        for _ in range(ITERATIONS):
            nxt = self.transition @ p
            nxt += p[self.dangling].sum() * seed
            nxt *= DAMPING
            nxt += restart
            moved = np.abs(nxt - p).sum()
            p = nxt
            if moved < TOLERANCE:
                break
        return p[self.n_entities:]

    def top(self, entities: Sequence[int], dense: np.ndarray | None, k: int) -> list[int]:
        """The ``k`` best passages' rows, best first; ties keep the dense order, then the row."""
        return self.top_scored(entities, dense, k)[0]

    def top_scored(self, entities: Sequence[int], dense: np.ndarray | None, k: int
                   ) -> tuple[list[int], list[float]]:
        """:meth:`top`'s rows and their PageRank mass."""
        mass = self.rank(entities, dense)
        if mass is None or k <= 0:
            return [], []
        rows = np.arange(self.n_passages)
        if k < self.n_passages:  # the k best and every passage tied with the k-th
            rows = np.flatnonzero(mass >= np.partition(mass, -k)[-k])
        dense = np.zeros(self.n_passages) if dense is None else dense
        best = rows[np.lexsort((rows, -dense[rows], -mass[rows]))][:k]
        return best.tolist(), mass[best].astype(float).tolist()


def _best(scores: np.ndarray, k: int) -> np.ndarray:
    """The rows of the ``k`` best scores, best first (ties: the lower row first)."""
    rows = np.arange(len(scores)) if k >= len(scores) else \
        np.argpartition(-scores, k - 1)[:k]
    return rows[np.lexsort((rows, -scores[rows]))]
