"""``python -m tools.studies.frozen_step``: interleaved training steps by frozen layer count, on a tiny BERT.

Speed is not asserted (a tiny model's step is noise); what is tested is that every count is timed for every
round, that the ratios are paired round by round against the first count, that the table names the CPU, and
that bad input is refused in one line."""

from __future__ import annotations

import pytest

from tools.studies.frozen_step import main, measure_frozen_steps
from compress.core.errors import CompressError
from tests.conftest import make_bert, sentiment_rows, write_csv

TEXTS = [r["text"] for r in sentiment_rows(40, seed=2)]


def test_each_count_is_timed_and_paired_against_the_first(tmp_path):
    model = make_bert(tmp_path / "bert", layers=2, head=True)
    results = measure_frozen_steps(str(model), TEXTS, [0, 2], steps=3, warmup=1, batch_size=8, threads=1)
    assert [r.frozen for r in results] == [0, 2]
    assert all(len(r.seconds) == 3 and all(s > 0 for s in r.seconds) for r in results)
    assert results[0].ratios == [1.0, 1.0, 1.0]
    assert results[1].ratios == pytest.approx([s / b for s, b in zip(results[1].seconds, results[0].seconds)])


def test_too_few_texts_for_a_batch_is_one_clear_error(tmp_path):
    model = make_bert(tmp_path / "bert", layers=2, head=True)
    with pytest.raises(CompressError, match="3 training texts; a step needs a batch of 8"):
        measure_frozen_steps(str(model), TEXTS[:3], [0], steps=1, warmup=0, batch_size=8)


def test_cli_prints_the_table_with_the_cpu(tmp_path, capsys):
    model = make_bert(tmp_path / "bert", layers=2, head=True)
    data = write_csv(tmp_path / "sentiment.csv", sentiment_rows(120, seed=3))
    assert main(["--model", str(model), "--data", str(data), "--frozen", "0,1", "--steps", "2", "--warmup", "0",
                 "--batch-size", "8", "--threads", "1"]) == 0
    out = capsys.readouterr().out
    assert "CPU: " in out and "| frozen layers |" in out
    cells = [line.split("|")[1].strip() for line in out.splitlines() if line.startswith("| ")]
    assert cells == ["frozen layers", "0", "1"]


def test_bad_counts_are_refused(capsys):
    with pytest.raises(SystemExit):
        main(["--model", "m", "--data", "d", "--frozen", "0,-1"])
    assert "--frozen counts must be 0 or more" in capsys.readouterr().err
