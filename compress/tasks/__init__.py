"""Tasks: what a kind of model output means, one package per task behind one protocol (:mod:`.protocol`).

Importing this package registers ``sequence-classification``, ``token-classification``, ``question-answering``,
``sentence-similarity`` and ``sentence-embedding`` (in that order: the data decides the task by asking them in
it), then imports the modules named in :data:`TASK_MODULES_ENV`, so a task of the user's (a module that registers
its ``Task`` when imported) is known in every process a run starts, the fresh ones of bench and optimize too. It
imports numpy and nothing of torch or transformers, so the torch-free runtime may use it; each task's aspects are
imported when a stage first asks for them.
"""

from compress.tasks import sequence_classification, token_classification
from compress.tasks import question_answering  # registered third: task_names() keeps its order
from compress.tasks import sentence_similarity  # noqa: E402,F401  (registers sentence-similarity)
from compress.tasks import sentence_embedding  # noqa: E402,F401  (registers sentence-embedding)
from compress.tasks.registry import Task, get_task, register_task, task_for_architectures, task_names, unregister_task

import importlib as _importlib
import os as _os

#: Modules (comma-separated) that register tasks of the user's; :func:`compress.run_stage.run_in_fresh_process`
#: passes on the ones registered in the parent.
TASK_MODULES_ENV = "BERT_COMPRESS_TASK_MODULES"


def _import_task_modules() -> None:
    from compress.core.errors import CompressError

    for name in filter(None, (m.strip() for m in _os.environ.get(TASK_MODULES_ENV, "").split(","))):
        try:
            _importlib.import_module(name)
        except ImportError as exc:
            raise CompressError(f"{TASK_MODULES_ENV} names {name!r}, which cannot be imported ({exc}). Put the "
                                "module on PYTHONPATH, or drop it from the variable.") from exc


_import_task_modules()

__all__ = ["TASK_MODULES_ENV", "Task", "get_task", "register_task", "unregister_task", "task_names", "task_for_architectures",
           "sequence_classification", "token_classification", "question_answering"]
