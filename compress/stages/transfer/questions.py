"""Transfer questions for distilling a span reader: (question, passage) pairs without answers.

A reader distilled on a few hundred labelled questions sees a few hundred answer distributions of
its teacher; the teacher can score any question about any passage, so the cheapest way to give the
student more of its teacher is more questions (TinyBERT's "transfer data", for readers). What users
have is question logs and document stores without answers, so the source needs only a question and a
passage per row:

- anything ``--data`` takes for QA (the built-in ``squad-dev``, a SQuAD-format ``.json`` file or
  folder, ``hf:NAME``): the questions of all its splits, their answers ignored;
- a ``.jsonl``/``.csv``/``.tsv``/``.parquet`` table with a ``question`` and a ``context`` (or
  ``passage``) column.

What is dropped before the teacher labels anything (and counted in ``compress.json``): empty rows,
duplicates, every question about a passage of the task's validation or test split (before any
``limit`` cut, so a held-out article's other passages cannot leak in either: a passage is held out
when its text, or its article's title, is held out), and the labelled training questions themselves
(they would count twice). ``--unlabeled-limit`` then keeps a seeded sample.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from compress.tasks.tables import read_table
from compress.core.errors import CompressError
from compress.tasks.question_answering.data import CONTEXT_COLUMNS, QUESTION_COLUMNS, QATaskData, load_qa_data, pick_column
from compress.corpora.corpus import UnlabeledCorpus, filter_unlabeled
from compress.corpora.texts import text_key

#: The table files a question source may be, beside what ``--data`` takes.
TABLE_SUFFIXES = (".jsonl", ".csv", ".tsv", ".parquet")


def read_questions(spec: str, seed: int = 0) -> tuple[UnlabeledCorpus, list[str | None]]:
    """The (question, passage) pairs of ``spec`` as an :class:`UnlabeledCorpus` (questions as ``texts``, passages
    as ``pairs``; empty rows dropped and counted) and each kept row's article title (``None`` in a table)."""
    path = Path(spec).expanduser()
    if path.is_file() and path.suffix.lower() in TABLE_SUFFIXES:
        frame = read_table(path)
        columns = [str(c) for c in frame.columns]
        fix = "Transfer questions for a reader need one question and one passage per row."
        q_col = pick_column(columns, QUESTION_COLUMNS, f"--unlabeled {path}", "question", fix)
        c_col = pick_column(columns, CONTEXT_COLUMNS, f"--unlabeled {path}", "passage", fix)
        rows = [(q, c, None) for q, c in zip(frame[q_col].tolist(), frame[c_col].tolist())]
    elif spec == "squad-dev" or path.exists() or path.suffix.lower() not in TABLE_SUFFIXES:
        try:
            data = load_qa_data(spec, seed=seed)
        except CompressError as exc:  # its message speaks of --data; say which option it was
            raise CompressError(f"--unlabeled {spec}: {exc}") from exc
        rows = [row for split in data.splits.values()
                for row in zip(split["question"][:], split["context"][:], split["title"][:])]
    else:
        raise CompressError(f"--unlabeled {spec}: no such file. Give a QA data source (squad-dev, a SQuAD-format "
                            f".json file or folder, hf:NAME) or a {'/'.join(TABLE_SUFFIXES)} table with question "
                            "and context columns.")
    questions, passages, titles = [], [], []
    for question, passage, title in rows:
        if isinstance(question, str) and isinstance(passage, str) and question.strip() and passage.strip():
            questions.append(question.lstrip())
            passages.append(passage)
            titles.append(title)
    empty = len(rows) - len(questions)
    return UnlabeledCorpus(questions, passages, spec, {"rows": len(rows), "empty": empty}), titles


def transfer_questions(spec: str, task: QATaskData, labelled: QATaskData, limit: int | None = None,
                       seed: int = 0) -> tuple[list[str], list[str], dict[str, Any]]:
    """``(questions, passages, stats)`` of the transfer source ``spec`` for a reader trained on ``labelled``'s
    training split, with ``task`` the same data before any ``limit`` cut (its validation and test passages and
    titles are what is held out; module docstring)."""
    corpus, titles = read_questions(spec, seed)
    held_passages: set[str] = set()
    held_titles: set[str] = set()
    for name in ("validation", "test"):
        if name in task.splits:
            held_passages |= {text_key(c) for c in task.splits[name]["context"][:]}
            held_titles |= set(task.splits[name]["title"][:])
    if "train" in task.splits:  # a title both sides use (a user's generic one) says nothing; the passage decides
        held_titles -= set(task.splits["train"]["title"][:])
    keep_q, keep_p = [], []
    for question, passage, title in zip(corpus.texts, corpus.pairs or [], titles):
        if text_key(passage) not in held_passages and title not in held_titles:
            keep_q.append(question)
            keep_p.append(passage)
    train = labelled.splits["train"]
    in_training = {text_key(q.lstrip(), c) for q, c in zip(train["question"][:], train["context"][:])}
    kept, pairs, stats = filter_unlabeled(UnlabeledCorpus(keep_q, keep_p, spec, dict(corpus.stats)), set(),
                                          in_training, limit, seed)
    stats.pop("in_validation_or_test", None)  # held out by passage above, not by (question, passage)
    stats["about_validation_or_test_passages"] = len(corpus.texts) - len(keep_q)
    return kept, pairs or [], {"source": spec, **stats}
