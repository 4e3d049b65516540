"""The distillation losses and their registry live in :mod:`compress.losses` (a leaf module that
configs read without loading the trainer); this module keeps the old import path working."""

from compress.losses import (INTERMEDIATE_SIGNALS, KINDS, LOSSES, SIGNALS, LossTerm, attention_mse,  # noqa: F401
                             check_terms, hard_cross_entropy, hidden_cosine, hidden_mse, hidden_nmse, kl_divergence,
                             names, register, soft_cross_entropy)
