"""Word-level labels and logits over sub-word tokens (first sub-token of each word).

A tagger is trained and scored per *word*, while the model sees sub-word tokens: ``Gurez`` may be
one token for one tokenizer and ``gu ##rez`` for another. The rule everywhere (transformers'
token-classification examples use it too): a word's label sits on its **first** sub-token, the
others and the special tokens get ``-100`` (ignored by the loss), and a word's prediction is the
logit vector of its first sub-token. Because soft labels are gathered per word with the same rule,
a teacher and a student with different tokenizers produce arrays of the same shape, row for row.

Inputs are the ``word_ids()`` of a fast tokenizer's encoding of pre-split words
(``tokenizer(words, is_split_into_words=True).word_ids()``): one entry per token, the word's
index or ``None`` for special and padding tokens. numpy only.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

IGNORE_INDEX = -100


def first_subtokens(word_ids: Sequence[int | None], n_words: int) -> np.ndarray:
    """For each of ``n_words`` words, the position of its first sub-token; ``-1`` for a word with none
    (cut off by truncation, or a word the tokenizer turns into nothing)."""
    first = np.full(n_words, -1, dtype=np.int64)
    for position, word in enumerate(word_ids):
        if word is not None and 0 <= word < n_words and first[word] < 0:
            first[word] = position
    return first


def label_positions(word_ids: Sequence[int | None], word_labels: Sequence[int],
                    ignore_index: int = IGNORE_INDEX) -> list[int]:
    """Per-token labels: each word's label on its first sub-token, ``ignore_index`` everywhere else."""
    out = [ignore_index] * len(word_ids)
    for word, position in enumerate(first_subtokens(word_ids, len(word_labels))):
        if position >= 0:
            out[position] = int(word_labels[word])
    return out


def word_logits(token_logits: np.ndarray, word_ids: Sequence[int | None], n_words: int) -> tuple[np.ndarray, np.ndarray]:
    """``(logits, present)``: each word's first-sub-token logit row, ``(n_words, labels)``, and which
    words had a token at all (rows of absent words are 0; the caller decides what they mean).

    ``token_logits`` is one sequence, ``(tokens, labels)``, aligned with ``word_ids`` (a padded
    row longer than ``word_ids`` is fine: the padding is never a first sub-token).
    """
    token_logits = np.asarray(token_logits)
    if token_logits.ndim != 2 or token_logits.shape[0] < len(word_ids):
        raise ValueError(f"token logits of shape {token_logits.shape} do not cover {len(word_ids)} tokens")
    first = first_subtokens(word_ids, n_words)
    present = first >= 0
    out = np.zeros((n_words, token_logits.shape[1]), dtype=token_logits.dtype)
    out[present] = token_logits[first[present]]
    return out, present


def batch_word_logits(token_logits: np.ndarray, word_ids: Sequence[Sequence[int | None]],
                      n_words: Sequence[int]) -> list[tuple[np.ndarray, np.ndarray]]:
    """:func:`word_logits` for each row of a padded batch ``(batch, tokens, labels)``."""
    return [word_logits(token_logits[i], ids, n) for i, (ids, n) in enumerate(zip(word_ids, n_words))]
