"""Two-tower sentence encoding (a bi-encoder): each text alone becomes one vector; similarity is their cosine.

The model is a transformers encoder (``AutoModel``) with sentence-transformers' pooling and, usually,
normalisation after it (:mod:`.folder` reads them from ``modules.json``; :class:`.pooling.PooledEncoder` computes
them inside ``forward``, so the ONNX graph answers with the vector). One output, ``sentence_embedding`` of axes
``(batch, hidden)``; the teacher's "soft label" of a text is its vector. Quality is the STS Spearman of the
cosines against gold scores (x100, the primary metric) and, on unlabelled text, neighbour recall@10 against the
teacher and the cosine agreement (:mod:`.metrics`). A student learns the teacher's vectors through a projection
MSE and/or the batch's cosine matrix (:mod:`.losses`, :mod:`.distill`); long texts are read in windows
(:mod:`.long_texts`). ``Predictor.encode`` gives an ``(n, dim)`` float32 array.

This module imports numpy only (the torch-free runtime reads the registry).
"""

from __future__ import annotations

from compress.tasks.registry import BATCH, ENCODER_INPUTS, Task, register_task
from compress.tasks.sentence_embedding.metrics import score

NAME = "sentence-embedding"
#: The vector's axis (fixed per model: 384 for MiniLM, 768 for MPNet-base).
HIDDEN = "hidden"
#: The single output's name, as sentence-transformers names it.
OUTPUT = "sentence_embedding"

TASK = register_task(Task(
    name=NAME,
    package=__name__,
    description="one vector per text (a two-tower / bi-encoder model), compared by cosine: semantic search, "
                "deduplication, STS; scored on STS Spearman and neighbour recall against the teacher",
    auto_model="AutoModel",
    # No transformers head names this task (its models are bare encoders, told by modules.json); the suffix
    # matches the in-memory PooledEncoder only, so a bare BertModel is never taken for it.
    head_suffix="PooledEncoder",
    inputs=ENCODER_INPUTS,
    outputs={OUTPUT: (BATCH, HIDDEN)},
    label_unit="text",
    soft_labels=("texts", HIDDEN),
    metrics=("spearman", "pearson", "neighbour_recall", "cosine_agreement"),
    primary_metric="spearman",
    metric_label="Spearman",
    predictor_returns=("embedding",),
    score=score,
    aliases=("sentence_embedding", "bi-encoder", "two-tower"),
))
