"""Sequence classification of texts past the window in the training stages (compress.stages.long_texts).

What is checked: texts that fit pass through untouched; a long text becomes the text of each of its
windows, every other column copied, re-tokenizing to the window's own tokens (exactly, for words of
one token; whole words only, for words of several pieces, with every word whole in some window);
byte-level BPE keeps the spelling of a window's first word; pairs cut only the second text; the
teacher and distill stages train on the windows and score texts pooled, so the accuracy they record
is the one ``Predictor`` serves on the same texts, and ``--pooling`` and ``--stride`` are recorded and served.
"""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

from compress.stages.long_texts import window_texts
from compress.core.windows import encode_windows
from tests.conftest import FILLER, NEGATIVE, POSITIVE, make_bert, make_tokenizer, run_cli, write_csv

MAX_LENGTH, STRIDE = 24, 6
#: the fewest timed rounds bench takes, on the whole test split (``--quick`` would sample it)
FAST_BENCH = ("--batch-sizes", "1", "--seq-lens", "16", "--warmup", "0", "--runs", "1", "--threads", "1", "--no-memory")


def _dataset(columns: dict[str, list]):
    from datasets import Dataset

    return Dataset.from_dict(columns)


def one_token_words(n: int, seed: int = 0) -> str:
    """``n`` words that are each one token of the test vocabulary."""
    rng = random.Random(seed)
    return " ".join(rng.choice(FILLER + POSITIVE[:4]) for _ in range(n))


@pytest.fixture(scope="module")
def tok():
    return make_tokenizer()


def test_texts_that_fit_pass_through_untouched(tok):
    split = _dataset({"text": ["a good film", "dull"], "label": [1, 0]})
    windows = window_texts(split, tok, MAX_LENGTH, False)
    assert windows.rows is split and windows.sample.tolist() == [0, 1] and windows.split_texts == 0
    logits = np.array([[1.0, 2.0], [3.0, 4.0]], dtype=np.float32)
    assert windows.pool(logits) is logits


def test_a_long_text_becomes_its_windows_each_row_their_own_tokens(tok, capsys):
    long = one_token_words(70)
    split = _dataset({"text": ["short one", long, "another short"], "label": [0, 1, 0], "rating": [0.1, 0.9, 0.2]})
    windows = window_texts(split, tok, MAX_LENGTH, False, stride=STRIDE, what="student (train)")
    assert "1 of 3 texts are longer than 24 tokens for the student (train)" in capsys.readouterr().err
    expected = encode_windows(tok, [long], max_length=MAX_LENGTH, stride=STRIDE)
    n = len(expected)
    assert n >= 3 and windows.sample.tolist() == [0] + [1] * n + [2] and windows.split_texts == 1
    assert windows.rows.column_names == ["text", "label", "rating"]
    assert windows.rows["label"] == [0] + [1] * n + [0] and windows.rows["rating"] == [0.1] + [0.9] * n + [0.2]
    rows = windows.rows["text"][1:1 + n]
    # one-token words: no edge cuts a word, so each row re-tokenizes to exactly the window's ids
    assert [tok(r)["input_ids"] for r in rows] == expected.input_ids
    assert all(r.strip() in long for r in rows)
    logits = np.arange(2 * len(windows.rows), dtype=np.float32).reshape(-1, 2)
    pooled = windows.pool(logits, "mean")
    assert pooled.shape == (3, 2) and np.allclose(pooled[1], logits[1:1 + n].mean(0)) and np.allclose(pooled[2], logits[-1])
    assert np.allclose(windows.pool(logits, "max")[1], logits[1:1 + n].max(0))


def test_window_edges_leave_words_whole_and_every_word_is_read_whole(tok):
    bases = ["unbelievably", "overlong", "tokenization", "tedious", "film"]
    words = [f"{bases[i % len(bases)]}{i}" for i in range(60)]  # several pieces each, and never repeated
    text = " ".join(words)
    assert max(len(tok(w, add_special_tokens=False)["input_ids"]) for w in words) <= 8
    windows = window_texts(_dataset({"text": [text], "label": [1]}), tok, 32, False, stride=8)
    rows = windows.rows["text"]
    assert len(rows) >= 4
    covered = set()
    for row in rows:
        assert len(tok(row)["input_ids"]) <= 32
        start = text.index(row.strip())
        assert start == 0 or text[start - 1] == " ", row  # starts on a word
        end = start + len(row.strip())
        assert end == len(text) or text[end] == " ", row  # ends on a word
        first = len(text[:start].split())
        covered.update(range(first, first + len(row.split())))
    assert covered == set(range(len(words)))  # no word is lost between windows


def test_a_word_longer_than_the_overlap_is_read_in_pieces_not_lost(tok):
    # numbers: words of one token that never repeat, so each window's text is found at its own place
    text = " ".join([str(i) for i in range(20)] + ["pneumonoultramicroscopicsilicovolcanoconiosis"]
                    + [str(i) for i in range(20, 40)])
    windows = window_texts(_dataset({"text": [text], "label": [1]}), tok, 16, False, stride=2)
    covered = np.zeros(len(text), dtype=bool)
    position = 0
    for row in windows.rows["text"]:
        start = text.index(row, position)
        covered[start:start + len(row)] = True
        position = start
    assert any(row.startswith("ultram") for row in windows.rows["text"])  # the long word is cut, not dropped
    assert covered[[i for i, c in enumerate(text) if c != " "]].all()  # every character is in some window


def test_byte_level_bpe_spells_a_windows_first_word_as_the_text_did():
    """RoBERTa-style tokenizers mark a word after a space ('Ġword'); a window's text keeps that space."""
    from tokenizers import ByteLevelBPETokenizer, processors
    from transformers import PreTrainedTokenizerFast

    corpus = [one_token_words(30, seed=s) + " unbelievably overlong tokenization" for s in range(40)]
    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(corpus, vocab_size=1000, min_frequency=1, special_tokens=["<s>", "<pad>", "</s>", "<unk>"])
    # roberta-base's tokenizer.json: ByteLevel with trim_offsets, RobertaProcessing without a prefix space
    bpe._tokenizer.post_processor = processors.RobertaProcessing(("</s>", 2), ("<s>", 0), trim_offsets=True,
                                                                 add_prefix_space=False)
    tok = PreTrainedTokenizerFast(tokenizer_object=bpe._tokenizer, bos_token="<s>", eos_token="</s>",
                                  pad_token="<pad>", unk_token="<unk>", cls_token="<s>", sep_token="</s>")
    text = corpus[0] + " " + corpus[1]
    windows = window_texts(_dataset({"text": [text], "label": [0]}), tok, 20, False, stride=4)
    whole = tok(text, add_special_tokens=False)["input_ids"]
    assert len(windows.rows) >= 3 and max(len(tok(w, add_special_tokens=False)["input_ids"]) for w in text.split()) <= 4
    for row in windows.rows["text"][1:]:
        ids = tok(row, add_special_tokens=False)["input_ids"]
        assert row.startswith(" ") and len(ids) <= 18
        assert any(whole[i:i + len(ids)] == ids for i in range(len(whole))), row  # the text's own tokens


def test_pairs_cut_only_the_second_text(tok):
    split = _dataset({"text": ["is it any good?", "short"], "text_pair": [one_token_words(60), "fine"], "label": [1, 0]})
    windows = window_texts(split, tok, MAX_LENGTH, True, stride=STRIDE)
    n = int((windows.sample == 0).sum())
    assert n >= 3 and windows.rows["text"] == ["is it any good?"] * n + ["short"]
    for first, second in zip(windows.rows["text"], windows.rows["text_pair"]):
        assert len(tok(first, second)["input_ids"]) <= MAX_LENGTH


# ----------------------------------------------------------------------------- the stages


def _rows(n: int, seed: int) -> list[dict]:
    """Sentiment rows (one sentiment word among filler, every word one token); every third is long."""
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        label = i % 2
        words = [rng.choice(FILLER) for _ in range(rng.randint(3, 8) if i % 3 else rng.randint(40, 70))]
        for _ in range(1 if i % 3 else 4):  # a long text says it several times, so most of its windows do
            words.insert(rng.randint(0, len(words)), rng.choice(POSITIVE[:4] if label else NEGATIVE[:4]))
        rows.append({"text": " ".join(words), "label": label})
    return rows


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    from compress.config import DataOptions, TeacherConfig, TrainSettings
    from compress.stages.teacher import train_teacher

    root = tmp_path_factory.mktemp("long-texts")
    data = write_csv(root / "data.csv", _rows(300, seed=1))
    cfg = TeacherConfig(model=str(make_bert(root / "encoder", layers=2)), data=DataOptions(str(data)),
                        max_length=MAX_LENGTH, train=TrainSettings(epochs=3, lr=2e-3, batch_size=16, seed=0))
    return root, data, train_teacher(cfg, root / "teacher")


def _served_accuracy(folder, data, split: str) -> tuple[float, np.ndarray, object]:
    from compress.config import DataOptions
    from compress.runtime.predictor import Predictor

    task = DataOptions(str(data)).load()
    predictor = Predictor.load(folder)
    logits = predictor.logits(task.splits[split]["text"][:])
    labels = np.asarray(task.splits[split]["label"])
    return float((logits.argmax(-1) == labels).mean()), logits.argmax(-1), predictor


def _distill(teacher, data, out, capsys, *flags: str):
    """``bert-compress distill`` of a 1-layer student from ``teacher`` with windows of ``MAX_LENGTH`` tokens."""
    return run_cli(["distill", "--teacher", str(teacher), "--data", str(data), "--student", "1x32", "--init", "random",
                    "--lr", "2e-3", "--batch-size", "16", "--max-length", str(MAX_LENGTH), *flags, "--out", str(out)],
                   capsys)


def test_the_teacher_trains_on_windows_and_records_the_accuracy_predictor_serves(trained):
    root, data, teacher = trained
    meta = json.loads((teacher / "compress.json").read_text())
    assert (meta["stride"], meta["pooling"]) == (STRIDE, "mean")
    long = meta["long_texts"]
    assert long["train"]["texts"] > 50 and long["train"]["rows"] >= 240 + 2 * long["train"]["texts"]
    assert meta["training"]["global_steps"] == 3 * -(-long["train"]["rows"] // 16)  # every window is a row
    for split in ("validation", "test"):
        accuracy, _, predictor = _served_accuracy(teacher, data, split)
        assert (predictor.stride, predictor.pooling) == (STRIDE, "mean")
        assert meta["metrics"][split]["n"] == 30 and long[split]["texts"] > 0
        assert meta["metrics"][split]["accuracy"] == pytest.approx(accuracy, abs=1e-9)
    assert meta["metrics"]["validation"]["accuracy"] > 0.7


def test_distill_reads_the_same_windows_and_records_pooling_max(trained, capsys):
    root, data, teacher = trained
    out = root / "student-max"
    done = _distill(teacher, data, out, capsys, "--epochs", "2", "--pooling", "max")
    assert done.returncode == 0, done.stderr[-2000:]
    meta = json.loads((out / "compress.json").read_text())
    assert (meta["stride"], meta["pooling"], meta["config"]["pooling"]) == (STRIDE, "max", "max")
    assert meta["training"]["rows"] == meta["long_texts"]["train"]["rows"]
    from compress.config import DataOptions

    for split in ("validation", "test"):
        accuracy, student_pred, predictor = _served_accuracy(out, data, split)
        assert predictor.pooling == "max"
        assert meta["metrics"][split]["accuracy"] == pytest.approx(accuracy, abs=1e-9)
    # the agreement distill records is with its teacher pooled the student's way (max), on the same texts
    teacher_max = _served_accuracy(teacher, data, "test")[2].set_windows(pooling="max")
    texts = DataOptions(str(data)).load().splits["test"]["text"][:]
    agreement = float((teacher_max.logits(texts).argmax(-1) == student_pred).mean())
    assert meta["metrics"]["test"]["agreement"] == pytest.approx(agreement, abs=1e-9)
    assert meta["metrics"]["test"]["teacher_accuracy"] != meta["metrics"]["test"]["accuracy"] or agreement == 1.0


def test_stride_sets_the_overlap_of_the_training_windows_and_travels_to_serving(trained, capsys):
    """``--stride`` (a smaller overlap than the default quarter): distill trains and scores on windows that
    overlap by it (fewer rows than the default gives), records it, and ``Predictor`` serves with it, so the
    recorded accuracy is still the served one."""
    from compress.config import DataOptions
    from compress.runtime.modeling import load_classifier

    root, data, teacher = trained
    out = root / "student-stride"
    done = _distill(teacher, data, out, capsys, "--epochs", "1", "--stride", "2")
    assert done.returncode == 0, done.stderr[-2000:]
    meta = json.loads((out / "compress.json").read_text())
    assert (meta["stride"], meta["config"]["stride"]) == (2, 2)
    train = DataOptions(str(data)).load().splits["train"]
    _, student_tok, _ = load_classifier(out)
    rows = {stride: len(window_texts(train, student_tok, MAX_LENGTH, False, stride).rows) for stride in (2, None)}
    assert meta["long_texts"]["train"]["rows"] == meta["training"]["rows"] == rows[2] < rows[None]
    for split in ("validation", "test"):
        accuracy, _, predictor = _served_accuracy(out, data, split)
        assert predictor.stride == 2
        assert meta["metrics"][split]["accuracy"] == pytest.approx(accuracy, abs=1e-9)


def test_a_stride_the_window_cannot_hold_is_refused_before_any_work(trained, tmp_path, capsys):
    root, data, teacher = trained
    out = tmp_path / "student"
    done = _distill(teacher, data, out, capsys, "--stride", str(MAX_LENGTH - 2))
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1 and not out.exists()
    assert f"--stride {MAX_LENGTH - 2}" in lines[0] and f"from 0 to {MAX_LENGTH - 3}" in lines[0], lines


def test_bench_reads_every_artifact_with_the_stride_and_pooling_it_is_given(trained, tmp_path, capsys):
    """``bench --stride/--pooling``: every artifact reads the long test texts that way instead of as it recorded
    (results.json says what each used), so two window settings are compared on the same model and examples; a
    stride one artifact's window cannot hold is refused in one line before anything is measured."""
    from compress.config import DataOptions
    from compress.runtime.predictor import Predictor

    root, data, teacher = trained
    texts = DataOptions(str(data)).load().splits["test"]["text"][:]

    def bench(out, *flags):
        done = run_cli(["bench", str(teacher), "--reference", str(teacher), "--data", str(data), "--out", str(out),
                        *FAST_BENCH, *flags], capsys)
        assert done.returncode == 0, done.stderr[-2000:]
        (row,) = json.loads((out / "results.json").read_text())["artifacts"]
        return row

    given, recorded = bench(tmp_path / "given", "--stride", "2", "--pooling", "max"), bench(tmp_path / "recorded")
    assert (given["stride"], given["pooling"], recorded["stride"], recorded["pooling"]) == (2, "max", STRIDE, "mean")
    served = {key: Predictor.load(teacher).set_windows(*windows).logits(texts).argmax(-1)
              for key, windows in (("given", (2, "max")), ("recorded", (None, None)))}
    assert given["quality"]["predictions"] == served["given"].tolist()
    assert recorded["quality"]["predictions"] == served["recorded"].tolist()
    assert given["quality"]["predictions"] != recorded["quality"]["predictions"]  # the flags changed what was read

    out = tmp_path / "refused"
    for stride, message in ((MAX_LENGTH - 2, f"--stride {MAX_LENGTH - 2}: the overlap"), (-1, "got -1")):
        done = run_cli(["bench", str(teacher), "--reference", str(teacher), "--data", str(data), "--out", str(out),
                        *FAST_BENCH, "--stride", str(stride)], capsys)
        lines = done.stderr.strip().splitlines()
        assert done.returncode != 0 and len(lines) == 1 and not out.exists()
        assert message in lines[0], lines


def test_a_choice_reads_with_one_stride_and_pooling_in_every_runtime_it_serves(trained, tmp_path):
    """A ``choice`` (optimize's output) records the reading settings of the model it was made from; each runtime
    it serves from must read a long text the same way, since bench scores them one by one, and a stride given
    to ``Predictor.load`` must reach them too."""
    import shutil

    from compress.core.artifact import write_artifact
    from compress.config import DataOptions
    from compress.runtime.predictor import Predictor

    root, data, teacher = trained

    def fill(folder):
        for name in ("a", "b"):
            shutil.copytree(teacher, folder / "candidates" / name, ignore=shutil.ignore_patterns("*.checkpoints"))

    choice = write_artifact(tmp_path / "choice", fill, {"stage": "optimize", "kind": "choice", "stride": 4, "choice": {
        "by_batch_size": {"1": "candidates/a", "32": "candidates/b"}}})
    texts = DataOptions(str(data)).load().splits["test"]["text"][:]
    for given, expected in (((None, None), (4, "mean")), ((2, "max"), (2, "max"))):
        predictor = Predictor.load(choice, stride=given[0], pooling=given[1])
        subs = list(predictor.by_batch_size.values())
        assert {(p.stride, p.pooling) for p in [predictor, *subs]} == {expected}  # the teacher recorded STRIDE, mean
        for batch_size, sub in predictor.by_batch_size.items():
            assert np.allclose(sub.logits(texts, batch_size=batch_size),
                               predictor.logits(texts, batch_size=batch_size), atol=1e-5)
