"""Transfer data for distillation: augmented variants and unlabelled in-domain text.

Logit distillation on the labelled set alone adds little over fine-tuning: a good teacher is right
on almost every training sentence, so its soft labels say little beyond the hard ones. What closes
the gap is *more text for the teacher to label* (TinyBERT, Jiao et al. 2020; Tang et al. 2019):

- **augmentation** (``--augment N``): N variants of every training example, made by replacing
  whole words with candidates from a masked-LM head (TinyBERT's recipe, probability 0.4 per word)
  or, when no such head is available, with nearest neighbours in the teacher's input-embedding
  space; and by masking, deleting and swapping words. Variants are seeded, deduplicated, never
  equal to a labelled, validation or test text, and cached on disk;
- **unlabelled text** (``--unlabeled PATH`` or the built-in ``movie-reviews-unlabeled``): a plain
  text corpus from the task's domain.
- **mention-replaced variants** for taggers (``--mention-variants N``): each entity mention of a
  training sentence swapped for another training mention of its type; the gold tags follow, so these
  rows keep a hard label as well (:mod:`~compress.stages.transfer.mentions`).

The first two kinds have no gold label: the teacher soft-labels every row (through the same cached
:func:`compress.stages.teacher.teacher_logits` as the training set), the rows carry ``label = -100`` so
the hard-label loss skips them, and a ``sample_weight`` column sets how much each row's soft-label
loss counts (``--unlabeled-weight`` for the corpus; 1 for labelled and augmented rows).

Modules: :mod:`~compress.corpora.texts` (text identity), :mod:`~compress.corpora.corpus`
(reading and filtering unlabelled corpora), :mod:`~compress.corpora.builtin` (the built-in
corpus), :mod:`~compress.stages.transfer.segment` (word segmentation), :mod:`~compress.stages.transfer.candidates`
(replacement words), :mod:`~compress.stages.transfer.augment` (variants), :mod:`~compress.stages.transfer.mentions`
(a tagger's mention-replaced variants) and
:mod:`~compress.stages.transfer.assemble` (the transfer set the distill stage trains on).
"""

from __future__ import annotations

from compress.tasks.tables import BUILTIN_UNLABELED, MOVIE_REVIEWS_UNLABELED_VERSION
from compress.stages.transfer.assemble import TransferOptions, TransferSet, build_transfer, tokenize_for_distillation
from compress.stages.transfer.augment import (AUGMENT_VERSION, MASK, OPS, AugmentOptions, augment_examples, augmented_rows,
                                       parse_ops)
from compress.corpora.builtin import MIN_WORDS, movie_reviews_unlabeled, movie_reviews_unlabeled_stats, review_sentences
from compress.stages.transfer.candidates import EmbeddingNeighbours, MaskedLMCandidates, candidate_source, mlm_head_keys
from compress.corpora.corpus import (BUILTIN_CORPUS_STATS, UNLABELED_SUFFIXES, UnlabeledCorpus, filter_unlabeled,
                                      held_out_overlap, load_unlabeled, read_unlabeled)
from compress.stages.transfer.segment import Segmented, segment, whole_words
from compress.corpora.texts import HeldOutRuns, normalize_text, split_keys, split_texts, text_key
from compress.corpora.wnut_raw import wnut17_unlabeled, wnut17_unlabeled_stats

__all__ = [
    "AUGMENT_VERSION", "BUILTIN_CORPUS_STATS", "BUILTIN_UNLABELED", "HeldOutRuns", "MASK", "MIN_WORDS", "MOVIE_REVIEWS_UNLABELED_VERSION", "OPS",
    "UNLABELED_SUFFIXES", "AugmentOptions", "EmbeddingNeighbours", "MaskedLMCandidates", "Segmented", "TransferOptions",
    "TransferSet", "UnlabeledCorpus", "augment_examples", "augmented_rows", "build_transfer", "candidate_source",
    "filter_unlabeled", "held_out_overlap", "load_unlabeled", "mlm_head_keys", "movie_reviews_unlabeled", "movie_reviews_unlabeled_stats",
    "normalize_text", "parse_ops", "read_unlabeled", "review_sentences", "segment", "split_keys", "split_texts", "text_key",
    "tokenize_for_distillation", "whole_words", "wnut17_unlabeled", "wnut17_unlabeled_stats",
]
