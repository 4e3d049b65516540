"""Choosing transfer sentences by their likeness to the task's own (``distill --unlabeled-select similar``).

A seeded sample of an unlabelled corpus spends the teacher's labelling and the student's steps on any
sentence of it; a user's corpus (support tickets of every product, posts of every channel) holds much
that the task's sentences never look like. Here every corpus text is scored by its TF-IDF cosine
similarity to its nearest labelled training text, and the ``limit`` highest are kept. TF-IDF over
lower-cased words needs no model pass (seconds for tens of thousands of texts on a CPU), and a text
that shares the task's rarer words with one of its sentences is in the task's domain whatever its
length. Computed with scipy's sparse matrices, in row chunks so memory stays bounded.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Sequence

import numpy as np

#: Words for the TF-IDF vectors: runs of letters or digits, lower-cased (any script).
_WORD = re.compile(r"\w+", re.UNICODE)
#: Corpus rows scored per sparse product: a dense ``CHUNK x labelled`` block at most.
CHUNK = 2048


def _words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def tfidf_matrices(labelled: Sequence[str], corpus: Sequence[str]):
    """L2-normalised TF-IDF rows (scipy CSR) of ``labelled`` and of ``corpus`` over one vocabulary: the words of
    the labelled texts (a corpus word they never use adds nothing to a similarity with them), with smoothed
    IDF ``log((1 + n) / (1 + df)) + 1`` over both sets (as scikit-learn's default)."""
    from scipy import sparse

    counts = [Counter(_words(t)) for t in labelled]
    vocab: dict[str, int] = {}
    for c in counts:
        for word in c:
            vocab.setdefault(word, len(vocab))
    corpus_counts = [Counter(w for w in _words(t) if w in vocab) for t in corpus]
    df = np.zeros(len(vocab))
    for c in counts + corpus_counts:
        for word in c:
            df[vocab[word]] += 1
    idf = np.log((1 + len(counts) + len(corpus_counts)) / (1 + df)) + 1

    def matrix(rows: list[Counter]):
        indptr, indices, values = [0], [], []
        for c in rows:
            for word, n in c.items():
                indices.append(vocab[word])
                values.append(n * idf[vocab[word]])
            indptr.append(len(indices))
        m = sparse.csr_matrix((np.asarray(values, dtype=np.float32), indices, indptr), shape=(len(rows), len(vocab)))
        norms = np.sqrt(np.asarray(m.multiply(m).sum(axis=1)).ravel())
        norms[norms == 0] = 1.0
        return sparse.diags(1.0 / norms).dot(m).tocsr()

    return matrix(counts), matrix(corpus_counts)


def nearest_similarity(labelled: Sequence[str], corpus: Sequence[str]) -> np.ndarray:
    """For each corpus text, its TF-IDF cosine similarity to the most similar labelled text (0 when it shares no
    word with any)."""
    if not len(corpus):
        return np.zeros(0, dtype=np.float32)
    if not len(labelled):
        return np.zeros(len(corpus), dtype=np.float32)
    lab, cor = tfidf_matrices(labelled, corpus)
    lab_t = lab.T.tocsc()
    best = np.zeros(len(corpus), dtype=np.float32)
    for start in range(0, len(corpus), CHUNK):
        block = cor[start:start + CHUNK].dot(lab_t)
        best[start:start + CHUNK] = np.asarray(block.max(axis=1).todense()).ravel()
    return best


def most_similar(labelled: Sequence[str], corpus: Sequence[str], limit: int) -> tuple[list[int], dict[str, float]]:
    """The indices (in corpus order) of the ``limit`` corpus texts most similar to the labelled ones (ties broken
    by corpus order), and a summary of the similarities (``median_all``, ``median_kept``, ``lowest_kept``) for
    the artifact's record."""
    scores = nearest_similarity(labelled, corpus)
    order = np.argsort(-scores, kind="stable")[:limit]
    kept = scores[order]
    summary = {"median_all": round(float(np.median(scores)), 4) if len(scores) else 0.0,
               "median_kept": round(float(np.median(kept)), 4) if len(kept) else 0.0,
               "lowest_kept": round(float(kept.min()), 4) if len(kept) else 0.0}
    return sorted(int(i) for i in order), summary
