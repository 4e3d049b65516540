"""Output to a file stays readable: no progress-bar redraws, periodic training log lines instead."""

from __future__ import annotations

from compress.cli import main
from compress.progress import bars_enabled


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
