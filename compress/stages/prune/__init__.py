"""Structured pruning: whole attention heads and FFN neurons, physically removed, reloadable.

What is removed, and what is not:

- A *head* is its rows of the query, key and value projections and the matching input columns of
  the attention output projection; an *FFN neuron* is one output of the intermediate dense layer
  and the matching input column of the output dense layer. Nothing else changes: the hidden width,
  the embeddings, the LayerNorms, the pooler and the classifier keep their shapes, so the residual
  stream (and any layer map or projection built on it) is untouched.
- Removal is physical: the weight matrices shrink, so the file, the parameter count and the
  compute all fall. Masking (zeroed weights that still cost time) is the complaint this stage
  exists to avoid (sparseml #741, nni #4780).

How it is done (torch-pruning 1.6.1 on transformers 5.24):

- torch-pruning's dependency graph traces the classifier and yields, for a head or a neuron, the
  group of coupled parameters; its ``GroupMagnitudeImportance`` / ``GroupTaylorImportance`` score
  every channel of a group, and ``Group.prune()`` removes the chosen channels from every member.
  Each group is checked to hold exactly the expected Linear layers before anything is removed.
- Which heads and neurons go is decided here, not by ``MetaPruner``. Measured on this stack,
  MetaPruner with ``num_heads``/``prune_num_heads=True``/``prune_head_dims=False``: (1) removes no
  head at all when the channel ratio is 0 (head removal only runs inside the channel-thresholding
  branch), so "heads only" is impossible; (2) rounds the per-layer head count up (``ceil``), so
  ``--heads 0.3`` on 4 heads removed 2 (50%); (3) with ``global_pruning`` ranks the FFN neurons
  together with the (never removed) attention dimensions, so ``--ffn 0.25`` removed 28%; (4) can
  empty a layer completely under global ranking. The selection below removes the nearest whole
  count to the requested share and always keeps one head and one neuron per layer.

Reloading: transformers 5 removed ``prune_heads``/``config.pruned_heads`` and a ``BertConfig``
derives the head size as ``hidden_size / num_attention_heads``, so it cannot describe a layer with
fewer heads of the original size. When only FFN neurons were removed, in equal numbers in every
layer, ``config.intermediate_size`` describes the result and plain ``from_pretrained`` reloads it
(``"loader": "transformers"``). Otherwise the per-layer shapes are written into ``config.json``
under ``"bert_compress_pruning"`` and :func:`compress.runtime.formats.pruned.load_pruned` (used by
:func:`compress.runtime.modeling.load_classifier`, hence by every stage and the runtime) builds the
original architecture, shrinks each layer to the recorded shapes and loads the weights
(``"loader": "compress"``). Plain ``from_pretrained`` on such a folder fails loudly with a size
mismatch rather than loading wrong weights.

Modules: :mod:`compress.runtime.formats.layouts` (where a layer's prunable parts live, per family),
:mod:`~compress.stages.prune.importance` (scores and selection), :mod:`~compress.stages.prune.removal`
(physical removal), :mod:`compress.runtime.formats.pruned` (the reload format, a leaf the runtime
imports) and :mod:`~compress.stages.prune.stage` (the stage).
"""

from __future__ import annotations

from compress.runtime.formats.layouts import LAYOUTS, LayerParts, encoder_parameters, head_size, layer_parts, structure
from compress.runtime.formats.pruned import (LOADER_COMPRESS, LOADER_TRANSFORMERS, PRUNING_FORMAT_VERSION, PRUNING_KEY,
                                     apply_pruned_shapes, load_pruned, loader_of, patch_config, pruning_spec)
from compress.stages.prune.importance import (IMPORTANCES, SCOPES, UnitScores, accumulate_task_gradients, score_units,
                                       select_units)
from compress.stages.prune.removal import PrunePlan, prune_model, remove_units
from compress.stages.prune.stage import PruneConfig, kl_divergence, prune

__all__ = [
    "IMPORTANCES", "LAYOUTS", "LOADER_COMPRESS", "LOADER_TRANSFORMERS", "PRUNING_FORMAT_VERSION", "PRUNING_KEY",
    "SCOPES", "LayerParts", "PruneConfig", "PrunePlan", "UnitScores", "accumulate_task_gradients",
    "apply_pruned_shapes", "encoder_parameters", "head_size", "kl_divergence", "layer_parts", "load_pruned",
    "loader_of", "patch_config", "prune", "prune_model", "pruning_spec", "remove_units", "score_units",
    "select_units", "structure",
]
