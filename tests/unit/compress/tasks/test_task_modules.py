"""A task of the user's is known in the fresh processes a run starts (bench and optimize run in one)."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys


from compress.run_stage import child_env
from compress.tasks import TASK_MODULES_ENV, get_task, register_task, unregister_task
from tests.support.paths import ROOT

MODULE = '''
import dataclasses
from compress.tasks import get_task, register_task
register_task(dataclasses.replace(get_task("sequence-classification"), name="my-task", aliases=(), package=__name__))
'''


def test_a_module_the_variable_names_registers_its_task_in_a_new_process(tmp_path):
    (tmp_path / "my_task_module.py").write_text(MODULE, encoding="utf-8")
    env = {**os.environ, TASK_MODULES_ENV: "my_task_module",
           "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}
    out = subprocess.run([sys.executable, "-c", "from compress.tasks import task_names; print(task_names())"],
                         env=env, capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert "'my-task'" in out.stdout and "'sequence-classification'" in out.stdout


def test_a_module_that_cannot_be_imported_is_one_line(tmp_path):
    env = {**os.environ, TASK_MODULES_ENV: "no_such_task_module"}
    out = subprocess.run([sys.executable, "-c", "import compress.tasks"], env=env, capture_output=True, text=True,
                         timeout=120, cwd=ROOT)
    assert out.returncode != 0 and "BERT_COMPRESS_TASK_MODULES names 'no_such_task_module'" in out.stderr


def test_the_child_of_a_stage_is_told_the_tasks_registered_outside_the_package(monkeypatch):
    monkeypatch.delenv(TASK_MODULES_ENV, raising=False)
    assert TASK_MODULES_ENV not in child_env()  # the built-in tasks need nothing
    register_task(dataclasses.replace(get_task("sequence-classification"), name="outside-task", aliases=(),
                                      package="somewhere.tasks.outside"))
    try:
        monkeypatch.setenv(TASK_MODULES_ENV, "already.named")
        assert child_env()[TASK_MODULES_ENV] == "already.named,somewhere.tasks.outside"
    finally:
        unregister_task("outside-task")


