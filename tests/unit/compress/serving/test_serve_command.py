"""``bert-compress serve``'s refusals: one line and exit code 2, before anything listens."""

from __future__ import annotations

import pytest

from compress.cli import main


@pytest.mark.parametrize("argv, message", [
    (["serve", "/no/such/folder"], "serve /no/such/folder: no such folder"),
    (["serve", ".", "--max-batch", "0"], "--max-batch must be a whole number of at least 1"),
    (["serve", ".", "--queue-size", "4"], "--queue-size 4 is below --max-batch 32"),
    (["serve", ".", "--max-wait-ms", "-1"], "--max-wait-ms must be 0 or more"),
    (["serve", ".", "--request-timeout", "0"], "--request-timeout must be above 0 seconds"),
    (["serve", ".", "--workers", "0"], "--workers must be a whole number of at least 1"),
    (["serve", ".", "--port", "70000"], "--port must be 0 to 65535"),
])
def test_bad_serve_settings_are_one_line(argv, message, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and len(err.strip().splitlines()) == 1


def test_a_task_without_a_request_shape_is_refused_by_name():
    from compress.core.errors import CompressError
    from compress.serving.schemas import check_task, servable_tasks

    served = servable_tasks()
    assert {"sequence-classification", "token-classification", "question-answering"} <= set(served)
    assert [check_task(t, "m") for t in served] == list(served)
    with pytest.raises(CompressError, match="a multiple-choice model has no request shape"):
        check_task("multiple-choice", "m")
