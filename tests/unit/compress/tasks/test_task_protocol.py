"""Every registered task answers every aspect's protocol (compress.tasks.protocol): the conformance test.

An aspect whose ``PROTOCOL`` lists members is checked for each registered task with
:func:`compress.tasks.protocol.missing_members`; a stage calls those members without asking which task it serves,
so a task lacking one fails in the middle of a stage instead of here.
"""

from __future__ import annotations

import importlib

import pytest

from compress.core.errors import CompressError
from compress.tasks import get_task, task_names
from compress.tasks.protocol import ASPECTS, missing_members

#: ``(task, aspect)`` pairs still being written (a task under construction); each is debt, and the set shrinks to
#: nothing. The test below fails once a pair is complete, so that it is taken off.
PENDING: set[tuple[str, str]] = set()


def _members(name: str) -> list[str]:
    protocol = importlib.import_module(f"compress.tasks.protocol.{name}").PROTOCOL
    return [m for m in vars(protocol) if not m.startswith("_")]


def _gaps(task: str, name: str) -> list[str]:
    """What ``task``'s ``name`` aspect lacks: missing members, or the whole aspect."""
    try:
        return missing_members(get_task(task), name)
    except CompressError as exc:
        return [f"no {name} aspect ({exc})"]


CHECKED = [(task, name) for task in task_names() for name in ASPECTS if _members(name)]


@pytest.mark.parametrize("task, name", CHECKED)
def test_every_task_has_every_member_of_each_aspect(task, name):
    if (task, name) in PENDING:
        pytest.skip(f"{task}'s {name} aspect is still being written (PENDING)")
    assert _gaps(task, name) == [], f"{task}'s {name} aspect lacks members of compress.tasks.protocol.{name}.PROTOCOL"


def test_each_protocol_member_is_a_documented_function():
    for name in ASPECTS:
        protocol = importlib.import_module(f"compress.tasks.protocol.{name}").PROTOCOL
        for member in _members(name):
            assert callable(getattr(protocol, member)) and getattr(protocol, member).__doc__, f"{name}.{member}"


def test_the_pending_list_names_only_aspects_that_still_lack_members():
    done = sorted(pair for pair in PENDING if pair[0] in task_names() and not _gaps(*pair))
    assert not done, f"complete now, take them off PENDING: {done}"


def test_each_member_of_the_existing_tasks_scoring_aspect_is_a_function():
    for task in ("sequence-classification", "token-classification", "question-answering"):
        scoring = get_task(task).aspect("scoring")
        assert all(callable(getattr(scoring, m)) for m in _members("scoring")), task
        assert set(scoring.gate_rules()) >= {"min_agreement", "max_regression"}, task
