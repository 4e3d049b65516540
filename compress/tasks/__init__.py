"""Tasks: what a kind of model output means, one registered object per task (see :mod:`.registry`).

Importing this package registers ``sequence-classification`` and ``token-classification``; it
imports numpy and nothing of torch or transformers, so the torch-free runtime may use it. The
task-specific helpers (:mod:`.token_data`, :mod:`.ner_metrics`, :mod:`.alignment`) are imported
where they are used.
"""

from compress.tasks import sequence_classification, token_classification
from compress.tasks.registry import Task, get_task, register_task, task_for_architectures, task_names, unregister_task

__all__ = ["Task", "get_task", "register_task", "unregister_task", "task_names", "task_for_architectures",
           "sequence_classification", "token_classification"]
