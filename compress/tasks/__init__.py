"""Tasks: what a kind of model output means, one registered object per task (see :mod:`.registry`).

Importing this package registers ``sequence-classification``, ``token-classification`` and
``question-answering`` (in that order); it imports numpy and nothing of torch or transformers, so
the torch-free runtime may use it. The task-specific helpers (:mod:`.token_data`,
:mod:`.ner_metrics`, :mod:`.alignment`, :mod:`.qa_data`, :mod:`.qa_features`) are imported where
they are used.
"""

from compress.tasks import sequence_classification, token_classification
from compress.tasks import question_answering  # registered third: task_names() keeps its order
from compress.tasks import sentence_similarity  # noqa: E402,F401  (registers sentence-similarity)
from compress.tasks import sentence_embedding  # noqa: E402,F401  (registers sentence-embedding)
from compress.tasks.registry import Task, get_task, register_task, task_for_architectures, task_names, unregister_task

__all__ = ["Task", "get_task", "register_task", "unregister_task", "task_names", "task_for_architectures",
           "sequence_classification", "token_classification", "question_answering"]
