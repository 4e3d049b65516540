"""Unlabelled text corpora (data layer): the built-in ones and users' files, read, normalised, filtered against
held-out text. The transfer stage (:mod:`compress.stages.transfer`) and the two-tower task read them."""
