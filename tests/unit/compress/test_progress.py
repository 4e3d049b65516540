"""Output to a file stays readable: no progress-bar redraws, periodic training log lines instead."""

from __future__ import annotations

from compress.cli import main
from compress.core.progress import bars_enabled


def test_bars_follow_the_terminal_and_the_override(monkeypatch):
    monkeypatch.delenv("BERT_COMPRESS_PROGRESS", raising=False)
    assert bars_enabled() is False  # pytest captures stderr: not a terminal
    monkeypatch.setenv("BERT_COMPRESS_PROGRESS", "1")
    assert bars_enabled() is True
    monkeypatch.setenv("BERT_COMPRESS_PROGRESS", "0")
    assert bars_enabled() is False


def test_a_logged_run_has_no_carriage_returns(tiny_encoder, sentiment_csv, tmp_path, capfd, monkeypatch):
    monkeypatch.delenv("BERT_COMPRESS_PROGRESS", raising=False)
    rc = main(["teacher", "--model", str(tiny_encoder), "--data", str(sentiment_csv), "--out", str(tmp_path / "t"),
               "--epochs", "2", "--lr", "1e-3", "--batch-size", "16"])
    out, err = capfd.readouterr()
    assert rc == 0, err
    assert "\r" not in out + err
    assert "train_runtime" in out  # the Trainer's own log lines replace the bar


def test_a_long_loop_prints_a_line_to_a_log_every_30_seconds(monkeypatch):
    """In a log (no terminal), a loop that runs past 30 s says how far it is and the time left; a short one is quiet."""
    from compress.core.progress import progress

    monkeypatch.setenv("BERT_COMPRESS_PROGRESS", "0")
    ticks = iter(range(0, 1000, 10))  # each step takes 10 s
    lines: list[str] = []
    assert list(progress(range(9), "teacher soft labels (train)", unit="batches", clock=lambda: next(ticks),
                         say=lines.append)) == list(range(9))
    assert lines == ["teacher soft labels (train): 33% (3 of 9 batches), 30 s, about 60 s left",
                     "teacher soft labels (train): 67% (6 of 9 batches), 60 s, about 30 s left",
                     "teacher soft labels (train): 100% (9 of 9 batches), 90 s, about 0 s left"]
    quick = iter(range(0, 100, 1))
    lines.clear()
    list(progress(range(9), "short", clock=lambda: next(quick), say=lines.append))
    assert lines == []
