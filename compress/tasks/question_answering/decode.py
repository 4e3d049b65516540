"""What ``Predictor.predict`` returns for a span reader (extractive question answering).

Each input is a ``(question, passage)`` pair. The passage is read in the windows the reader was
trained with (``stride`` from its ``compress.json``; only the passage is windowed, every window
repeats the question), every window gives a start and an end logit per token, and the answer is the
best span over all windows (:func:`compress.tasks.question_answering.features.decode_spans`: n-best starts and ends
per window, at most 30 tokens by default, mapped back to the passage's characters; the null answer competes
when the reader was trained on SQuAD 2.0 data, ``allow_null`` in its ``compress.json``, and wins when it beats the
best span by more than the ``null_threshold`` chosen on validation and recorded there). numpy and
the tokenizer only, so an ONNX reader is served without torch like the other tasks.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from compress.errors import CompressError
from compress.tasks.question_answering.features import DEFAULT_MAX_ANSWER_LENGTH, DEFAULT_N_BEST, DEFAULT_NULL_THRESHOLD, decode_spans


def _pairs(inputs: Any) -> tuple[list[str], list[str]]:
    """``(questions, passages)`` of one ``(question, passage)`` tuple or a list of them; one clear line
    for anything else."""
    if isinstance(inputs, tuple) and len(inputs) == 2 and all(isinstance(x, str) for x in inputs):
        inputs = [inputs]
    if isinstance(inputs, (str, bytes, dict)) or not hasattr(inputs, "__iter__"):
        raise CompressError(f"predict: a question-answering model takes (question, passage) tuples, got a "
                            f"{type(inputs).__name__}. Give [(question, passage), ...].")
    questions, passages = [], []
    for i, item in enumerate(inputs):
        if not (isinstance(item, (tuple, list)) and len(item) == 2 and all(isinstance(x, str) for x in item)):
            raise CompressError(f"input {i} is {item!r}; a question-answering model takes (question, passage) "
                                "tuples of two strings.")
        if not item[0].strip() or not item[1].strip():
            raise CompressError(f"input {i}: the question and the passage must both hold text.")
        questions.append(item[0].lstrip())  # SQuAD's questions may start with spaces; run_qa strips them too
        passages.append(item[1])
    return questions, passages


def answer_questions(predictor, inputs: Sequence[tuple[str, str]], batch_size: int = 32, *,
                     n_best: int = DEFAULT_N_BEST, max_answer_length: int = DEFAULT_MAX_ANSWER_LENGTH,
                     null_threshold: float | None = None) -> list[dict[str, Any]]:
    """One dict per question: ``question``, ``answer`` (a span of the passage, ``""`` for no answer),
    ``start`` / ``end`` (characters in the passage: ``passage[start:end] == answer``) and ``score``.

    ``n_best`` starts and ends are paired in each window and a span holds at most ``max_answer_length``
    tokens (``run_qa.py``'s 20 and 30): a longer limit finds long answers (addresses, lists) at the cost
    of more spurious long spans. A SQuAD 2.0 reader answers nothing when the null score beats the best span by
    more than ``null_threshold`` (default: the one its stage chose on validation, ``null_threshold`` in
    ``compress.json``; 0.0, ``run_qa.py``'s, for a reader that has none)."""
    questions, passages = _pairs(inputs)
    if not questions:
        return []
    windows = predictor.encode(list(zip(questions, passages)))
    rows = predictor.run_windows(windows, batch_size)
    meta = predictor.meta or {}
    allow_null = bool(meta.get("allow_null", False))
    if null_threshold is None:
        null_threshold = float(meta.get("null_threshold", DEFAULT_NULL_THRESHOLD))
    elif not allow_null:
        raise CompressError("--null-threshold: this reader was trained on SQuAD 1.1 data (every question has an "
                            "answer), so it never answers nothing; the setting is for SQuAD 2.0 readers.")
    decoded = decode_spans(windows, [r[:, 0] for r in rows], [r[:, 1] for r in rows], passages, n_best=n_best,
                           max_answer_length=max_answer_length, allow_null=allow_null, null_threshold=null_threshold)
    return [{"question": q, "answer": d["answer"], "start": d["start"], "end": d["end"], "score": d["score"]}
            for q, d in zip(questions, decoded)]


def read_passage(model: str, questions: Sequence[str] | None, context_file: str | None, texts: Sequence[str]) -> str:
    """``bert-compress predict`` on a reader: the passage of ``--context-file``, after refusing in one line
    what a reader cannot take (no question, no passage, positional texts, an unreadable or empty file)."""
    if texts:
        raise CompressError(f"{model} is a question-answering model: give --question Q (repeatable) and "
                            "--context-file PASSAGE.txt instead of positional texts.")
    if not questions or not context_file:
        raise CompressError(f"{model} is a question-answering model: give --question Q (repeatable) and "
                            "--context-file PASSAGE.txt (the passage the questions are about).")
    path = Path(context_file).expanduser()
    try:
        passage = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise CompressError(f"--context-file {path}: no such file. Give the text file holding the passage.") from None
    except UnicodeDecodeError as exc:
        raise CompressError(f"--context-file {path}: not UTF-8 text (byte {exc.start}). Save the passage as UTF-8.") from None
    except IsADirectoryError:
        raise CompressError(f"--context-file {path} is a folder. Give the text file holding the passage.") from None
    if not passage.strip():
        raise CompressError(f"--context-file {path} is empty. Give the text file holding the passage.")
    return passage
