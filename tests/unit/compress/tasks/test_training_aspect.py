"""Every built-in task's ``training`` aspect provides the whole protocol (:mod:`compress.tasks.protocol.training`):
the teacher, distill, prune and pretrain stages call each member of it on whichever task the data is for."""

from __future__ import annotations

import pytest

from compress.tasks import get_task
from compress.tasks.protocol import missing_members

TASKS = ("sequence-classification", "token-classification", "question-answering")


@pytest.mark.parametrize("name", TASKS)
def test_each_task_provides_the_training_protocol(name):
    assert missing_members(get_task(name), "training") == []

