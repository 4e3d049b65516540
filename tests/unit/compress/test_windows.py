"""Texts longer than the model's window: overlapping windows and their merge (compress.core.windows).

What is checked: the windows are the tokenizer's own overflow (equal to transformers'
``return_overflowing_tokens``), placed in the text (offsets and word ids map back to the
characters), pairs window only the second text; the max-context rule on a hand-computed case and
against BERT's own ``_check_is_max_context``; per-token merging with real tiny BERT taggers (exactly
the chosen window's logits, and equal to one whole-text run for a model whose tokens do not see
each other); pooled long-document logits through ``Predictor`` and ``bert-compress predict``; and
that the module runs with torch unimportable.
"""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from compress.core.errors import CompressError
from compress.core.windows import (Windows, default_stride, encode_windows, max_context_windows, merge_token_outputs,
                              pool_windows, window_starts)
from tests.conftest import make_bert, make_tokenizer

WORDS = ("the acting was wonderful but the plot dragged and the ending felt rushed while the cast "
         "stayed charming throughout").split()


def long_text(n_words: int, offset: int = 0) -> str:
    """Plain in-vocabulary words with a comma now and then: one token per word or comma."""
    out = []
    for i in range(n_words):
        out.append(WORDS[(i + offset) % len(WORDS)] + ("," if i % 7 == 6 else ""))
    return " ".join(out)


@pytest.fixture(scope="module")
def tok():
    return make_tokenizer()


def test_window_starts_follow_the_tokenizers_rule():
    assert window_starts(10, 6, 3) == [0, 3, 6]
    assert window_starts(6, 6, 3) == [0]  # fits: one window
    assert window_starts(7, 6, 0) == [0, 6]
    assert window_starts(13, 8, 3) == [0, 5]
    with pytest.raises(ValueError):
        window_starts(10, 4, 4)


@pytest.mark.parametrize("max_length,stride,pairs", [(16, 4, False), (24, 0, False), (12, 9, False), (16, 4, True),
                                                     (24, 0, True), (20, 3, True)])
def test_windows_are_transformers_overflowing_windows(tok, max_length, stride, pairs):
    """Same ids, types, masks, character offsets and overflow_to_sample_mapping as transformers gives."""
    texts = [long_text(60), "short and sweet", "", long_text(31, offset=3)]
    firsts = ["is it good?", "why", "a question with several words", "ok"]
    for args, strategy in [((firsts, texts), "only_second")] if pairs else [((texts,), True)]:
        w = encode_windows(tok, *args, max_length=max_length, stride=stride)
        hf = tok(*args, truncation=strategy, max_length=max_length, stride=stride, return_overflowing_tokens=True,
                 return_offsets_mapping=True)
        assert w.input_ids == hf["input_ids"] and w.attention_mask == hf["attention_mask"]
        assert w.token_type_ids == hf["token_type_ids"]
        assert w.offsets == [[tuple(o) for o in row] for row in hf["offset_mapping"]]
        assert w.sample.tolist() == list(hf["overflow_to_sample_mapping"])
        assert max(len(x) for x in w.input_ids) <= max_length and len(w) > len(texts)


def test_the_tokenizer_is_left_as_it_was(tok):
    backend = tok.backend_tokenizer
    backend.enable_padding(pad_id=0, pad_token="[PAD]", length=40)
    backend.enable_truncation(40)
    before = (backend.truncation, backend.padding)
    encode_windows(tok, [long_text(80)], max_length=16, stride=4)
    assert (backend.truncation, backend.padding) == before
    backend.no_padding()
    backend.no_truncation()


def test_threads_sharing_one_tokenizer_get_their_own_windows(tok):
    """A Predictor serves several threads at once (the load benchmark, a server's workers); pairs whose
    first texts differ in length need different overlaps, so unguarded, one thread's truncation
    setting lands in another's encoding (seen here without the lock: a few of 160 calls differ)."""
    import threading

    pairs = [("question " * (i % 9 + 1), long_text(200 + 13 * i)) for i in range(16)]
    expected = [encode_windows(tok, [q] * 4, [p] * 4, max_length=24, stride=6).input_ids for q, p in pairs]
    wrong: list[int] = []

    def client(k: int) -> None:
        for j in range(20):
            i = (k * 5 + j) % len(pairs)
            if encode_windows(tok, [pairs[i][0]] * 4, [pairs[i][1]] * 4, max_length=24, stride=6).input_ids != expected[i]:
                wrong.append(i)

    threads = [threading.Thread(target=client, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert wrong == []


def test_windows_place_every_token_and_offsets_map_back_to_characters(tok):
    text = "Café naïve — “quoted” words! " + long_text(70)
    w = encode_windows(tok, [text, "good"], max_length=20, stride=5)
    full = tok(text, add_special_tokens=False, return_offsets_mapping=True)
    assert len(w.windows_of(0)) >= 4 and w.doc_lengths.tolist() == [len(full["input_ids"]), 1]
    for k in w.windows_of(0):  # each window's text tokens are the text's tokens from its start
        a, b = w.segment[k]
        assert w.input_ids[k][a:b] == full["input_ids"][w.start[k]:w.start[k] + b - a]
    assert w.document_offsets(0) == [tuple(o) for o in full["offset_mapping"]]
    assert w.document_word_ids(0) == full.word_ids()
    pieces = tok.convert_ids_to_tokens(full["input_ids"])
    plain = len("Café naïve — “quoted” words! ")
    for piece, (a, b) in zip(pieces, w.document_offsets(0)):
        if a >= plain:  # the plain-ASCII part: each piece is its characters, lower-cased
            assert text[a:b].lower() == piece.removeprefix("##")
    assert text[slice(*w.document_offsets(0)[0])] == "Café"


def test_pairs_window_only_the_second_text(tok):
    question, passage = "what did the critics say about the acting?", long_text(90)
    w = encode_windows(tok, [question], [passage], max_length=32, stride=8)
    alone = tok(question)["input_ids"]  # [CLS] question [SEP]
    doc = tok(passage, add_special_tokens=False)["input_ids"]
    assert len(w) >= 4
    for k in range(len(w)):
        a, b = w.segment[k]
        assert w.input_ids[k][:a] == alone and w.input_ids[k][b:] == [tok.sep_token_id]
        assert w.token_type_ids[k] == [0] * a + [1] * (len(w.input_ids[k]) - a)
        assert w.input_ids[k][a:b] == doc[w.start[k]:w.start[k] + b - a]
        assert all(word is None for word in w.word_ids[k][:a])
    assert w.doc_lengths.tolist() == [len(doc)] and w.start[-1] + w.segment[-1][1] - w.segment[-1][0] == len(doc)
    fits = encode_windows(tok, ["is it good?"], ["yes it is"], max_length=32, stride=8)
    assert fits.input_ids == [tok("is it good?", "yes it is", truncation=True, max_length=32)["input_ids"]]


def test_a_long_first_text_lowers_the_overlap_or_is_refused(tok):
    question = long_text(18)  # 20 tokens + 3 special ones of a 32-token window: room for 9 of the passage
    assert len(tok(question, add_special_tokens=False)["input_ids"]) == 20
    w = encode_windows(tok, [question], [long_text(40)], max_length=32, stride=8)
    a, b = w.segment[0]
    assert b - a == 9 and len(w) > 3 and np.diff(w.start).tolist() == [9 - 4] * (len(w) - 1)  # overlap 8 -> 9 // 2
    with pytest.raises(CompressError, match="input 1: the first text of the pair is 45 tokens"):
        encode_windows(tok, ["fine", long_text(40)], ["a", "b"], max_length=32, stride=8)
    with pytest.raises(CompressError, match="--stride 30"):
        encode_windows(tok, ["x"], max_length=32, stride=30)


def test_max_context_rule_on_a_hand_computed_example():
    """10 tokens, windows of 6 overlapping by 3: starts 0, 3, 6 (the last holds 4).

    token:            0  1  2  3  4  5  6  7  8  9
    context in w0:    0  1  2  2  1  0
    context in w1:             0  1  2  2  1  0
    context in w2:                      0  1  1  0
    4 and 7 tie (1 and 1): the earlier window keeps them.
    """
    spans = [(0, 6), (3, 6), (6, 4)]
    assert max_context_windows(spans, 10).tolist() == [0, 0, 0, 0, 0, 1, 1, 1, 2, 2]


def bert_is_max_context(spans: list[tuple[int, int]], index: int, position: int) -> bool:
    """BERT's run_squad.py ``_check_is_max_context``, as published (its 0.01 * length tie-break included)."""
    best_score, best_index = None, None
    for span_index, (start, length) in enumerate(spans):
        end = start + length - 1
        if position < start or position > end:
            continue
        score = min(position - start, end - position) + 0.01 * length
        if best_score is None or score > best_score:
            best_score, best_index = score, span_index
    return index == best_index


def test_max_context_rule_agrees_with_berts_own_code():
    for n, capacity, stride in [(10, 6, 3), (50, 16, 4), (97, 20, 7), (40, 9, 8), (33, 33, 5), (61, 12, 0)]:
        spans = [(s, min(capacity, n - s)) for s in window_starts(n, capacity, stride)]
        chosen = max_context_windows(spans, n)
        for t in range(n):
            assert bert_is_max_context(spans, int(chosen[t]), t), (n, capacity, stride, t)


def _tagger(positions: int, seed: int = 0, context_free: bool = False):
    """A tiny random BertForTokenClassification (5 tags). ``context_free``: no position embeddings and zero
    attention values, so each token's logits depend on that token alone (not its neighbours or place)."""
    import torch
    from transformers import BertConfig, BertForTokenClassification

    torch.manual_seed(seed)
    config = BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=64, max_position_embeddings=positions, num_labels=5)
    model = BertForTokenClassification(config).eval()
    if context_free:
        with torch.no_grad():
            model.bert.embeddings.position_embeddings.weight.zero_()
            for layer in model.bert.encoder.layer:
                layer.attention.self.value.weight.zero_()
                layer.attention.self.value.bias.zero_()
    return model


def _run_windows(model, windows: Windows, batch_size: int = 3) -> list[np.ndarray]:
    """Per-token logits of every window, through padded length-sorted batches as serving runs them."""
    import torch

    out: list[np.ndarray] = [np.zeros(0)] * len(windows)
    with torch.inference_mode():
        for rows, arrays in windows.batches(batch_size, 0, True):
            logits = model(**{k: torch.from_numpy(v) for k, v in arrays.items()}).logits.numpy()
            for r, w in enumerate(rows):
                out[w] = logits[r, :len(windows.input_ids[w])]
    return out


def test_merged_token_logits_are_the_max_context_windows_own(tok):
    """Each token's merged row is bit for bit its row in the window BERT's rule picks; the windows
    really disagree on the shared tokens (position and context matter in this model), so picking the
    wrong one would show."""
    text = long_text(66)  # 3x the window's 22 text tokens
    w = encode_windows(tok, [text, "short"], max_length=24, stride=7)  # odd: some shared tokens tie
    outputs = _run_windows(_tagger(512), w)
    merged = merge_token_outputs(w, outputs)
    assert [m.shape for m in merged] == [(w.doc_lengths[0], 5), (1, 5)]
    rows, spans = w.windows_of(0), w.spans(0)
    disagree = shared = 0
    for t in range(int(w.doc_lengths[0])):
        holders = [k for k, (s, n) in enumerate(spans) if s <= t < s + n]
        best = [k for k in holders if bert_is_max_context(spans, k, t)]
        assert len(best) == 1
        at = lambda k: outputs[rows[k]][w.segment[rows[k], 0] + t - spans[k][0]]  # noqa: E731
        assert np.array_equal(merged[0][t], at(best[0]))
        shared += len(holders) > 1
        disagree += any(not np.allclose(at(k), at(best[0]), atol=1e-4) for k in holders)
    assert shared == 7 * (len(spans) - 1) and disagree >= 0.75 * shared  # nearly every token two windows share
    assert np.array_equal(merged[1][0], outputs[w.windows_of(1)[0]][1])


def test_a_document_3x_the_window_tags_as_one_whole_text_run(tok):
    """For a model whose tokens do not see each other, windows + merge == one run over the whole text."""
    import torch

    model = _tagger(512, seed=1, context_free=True)
    texts = [long_text(70), long_text(50, offset=5), "good"]
    windowed = encode_windows(tok, texts, max_length=24, stride=6)
    assert len(windowed.windows_of(0)) >= 3
    merged = merge_token_outputs(windowed, _run_windows(model, windowed))
    for i, text in enumerate(texts):
        enc = tok(text, return_tensors="pt")
        with torch.inference_mode():
            whole = model(**enc).logits[0, 1:-1].numpy()  # the text's tokens, without [CLS] and [SEP]
        assert merged[i].shape == whole.shape
        assert np.allclose(merged[i], whole, atol=1e-5)
        assert (merged[i].argmax(-1) == whole.argmax(-1)).all()
    assert len(set(merged[0].argmax(-1).tolist())) > 1  # the tags vary, so a misplaced row would show


def test_pooling_is_the_mean_or_max_of_the_windows():
    logits = np.array([[1.0, -2.0], [3.0, 0.0], [5.0, 4.0], [-1.0, 7.0]], dtype=np.float32)
    sample = np.array([0, 0, 1, 1])
    assert pool_windows(logits, sample, 2, "mean").tolist() == [[2.0, -1.0], [2.0, 5.5]]
    assert pool_windows(logits, sample, 2, "max").tolist() == [[3.0, 0.0], [5.0, 7.0]]
    with pytest.raises(CompressError, match="--pooling 'sum'"):
        pool_windows(logits, sample, 2, "sum")


@pytest.fixture(scope="module")
def classifier(tmp_path_factory):
    """A tiny random 3-label classifier whose head is scaled up, so that its windows' logits differ clearly."""
    import torch
    from transformers import AutoModelForSequenceClassification

    folder = make_bert(tmp_path_factory.mktemp("windows") / "clf", layers=2, head=True, seed=4, num_labels=3)
    model = AutoModelForSequenceClassification.from_pretrained(folder)
    with torch.no_grad():
        model.classifier.weight.mul_(200.0)
    model.save_pretrained(folder, safe_serialization=True)
    return folder


@pytest.mark.parametrize("pooling", ["mean", "max"])
def test_predictor_pools_a_long_documents_windows(classifier, tok, pooling):
    """Predictor.logits on a long document = the windows run one by one (transformers' own overflow
    windows, straight into the model) and pooled here; texts that fit keep their one-window logits."""
    import torch
    from transformers import AutoModelForSequenceClassification

    from compress.runtime.predictor import Predictor

    predictor = Predictor.load(classifier, max_length=24, stride=6, pooling=pooling)
    assert (predictor.stride, predictor.pooling) == (6, pooling)
    model = AutoModelForSequenceClassification.from_pretrained(classifier).eval()
    texts = ["a wonderful film", long_text(66), "dull", long_text(45, offset=2)]
    got = predictor.logits(texts, batch_size=4)
    for i, text in enumerate(texts):
        enc = tok(text, truncation=True, max_length=24, stride=6, return_overflowing_tokens=True)
        with torch.inference_mode():
            rows = np.stack([model(input_ids=torch.tensor([ids]), token_type_ids=torch.tensor([types])).logits[0].numpy()
                             for ids, types in zip(enc["input_ids"], enc["token_type_ids"])])
        expected = rows.mean(0) if pooling == "mean" else rows.max(0)
        assert len(rows) == (1 if len(text) < 30 else len(rows)) and (len(rows) >= 3 or len(text) < 30)
        assert np.allclose(got[i], expected, atol=1e-5), (i, got[i], expected)
    if pooling == "max":  # the two rules really differ on these windows
        mean = Predictor.load(classifier, max_length=24, stride=6, pooling="mean").logits(texts)
        assert not np.allclose(mean[1], got[1], atol=1e-3) and np.allclose(mean[0], got[0])


def test_predictor_defaults_and_bad_settings(classifier, tmp_path):
    import shutil

    from compress.runtime.predictor import Predictor

    p = Predictor.load(classifier, max_length=40)
    assert (p.stride, p.pooling) == (default_stride(40), "mean") == (10, "mean")
    recorded = tmp_path / "recorded"
    shutil.copytree(classifier, recorded)
    (recorded / "compress.json").write_text(json.dumps({"complete": True, "stage": "teacher",
                                                        "config": {"max_length": 40, "stride": 12, "pooling": "max"}}))
    p = Predictor.load(recorded)
    assert (p.max_length, p.stride, p.pooling) == (40, 12, "max")
    assert Predictor.load(recorded, max_length=14).stride == 3 == default_stride(14)  # 12 does not fit 14 - 2
    with pytest.raises(CompressError, match="--pooling 'median'"):
        Predictor.load(classifier, pooling="median")
    with pytest.raises(CompressError, match="--stride 40"):
        Predictor.load(classifier, max_length=40, stride=40)


def test_predict_command_windows_long_texts(classifier, capsys):
    from compress.cli import main
    from compress.runtime.predictor import Predictor

    text = long_text(60)
    assert main(["predict", "--model", str(classifier), "--max-length", "20", "--stride", "4", "--pooling", "max",
                 text]) == 0
    label, scores, echoed = capsys.readouterr().out.strip().split("\t")
    # the command's default precision is auto (bf16 where the CPU runs it natively): the same here
    labels, probs = Predictor.load(classifier, max_length=20, stride=4, pooling="max", precision="auto").predict([text])
    assert (label, echoed) == (labels[0], text)
    assert scores == " ".join(f"LABEL_{i}={p:.4f}" for i, p in enumerate(probs[0]))
    assert not np.allclose(probs, Predictor.load(classifier, max_length=20, stride=4).predict([text])[1], atol=1e-4)


def test_the_traffic_replay_sends_a_long_text_as_its_windows(classifier, tok):
    """bench --traffic times what serving runs: a long text's request is its windows, not a cut row."""
    from benchmarks.traffic import traffic_requests
    from compress.runtime.predictor import Predictor

    text = long_text(66)
    short, long = traffic_requests(Predictor.load(classifier, max_length=24, stride=6), ["dull", text])
    windows = tok(text, truncation=True, max_length=24, stride=6, return_overflowing_tokens=True)["input_ids"]
    assert len(windows) >= 3 and long["input_ids"].shape == (len(windows), 24)
    assert [row[mask == 1].tolist() for row, mask in zip(long["input_ids"], long["attention_mask"])] == windows
    assert short["input_ids"].tolist() == [tok("dull")["input_ids"]]


WINDOWS_WITHOUT_TORCH = """
import json, sys
import numpy as np
from compress.runtime.tokenization import ArtifactTokenizer
from compress.core.windows import encode_windows, merge_token_outputs, pool_windows
tok = ArtifactTokenizer.from_folder(sys.argv[1])
texts = json.loads(sys.argv[2])
w = encode_windows(tok, texts, max_length=16, stride=4)
ids = merge_token_outputs(w, [np.asarray(x)[:, None] for x in w.input_ids])
pooled = pool_windows(np.asarray([[float(len(x))] for x in w.input_ids]), w.sample, w.n_samples, "max")
loaded = sorted(m for m in sys.modules if m.split(".")[0] in BLOCKED)
print(json.dumps({"input_ids": w.input_ids, "merged": [m[:, 0].tolist() for m in ids], "pooled": pooled[:, 0].tolist(),
                  "loaded": loaded}))
"""


def test_windows_work_with_the_training_stack_unimportable(tmp_path, tok):
    from tests.support.paths import ROOT
    from tests.support.serving_env import BLOCKER, TRAINING_STACK, blocked_env

    tok.save_pretrained(tmp_path)
    texts = [long_text(50), "good"]
    done = subprocess.run([sys.executable, "-c", BLOCKER + WINDOWS_WITHOUT_TORCH, ",".join(TRAINING_STACK),
                           str(tmp_path), json.dumps(texts)], capture_output=True, text=True, timeout=120,
                          env=blocked_env(), cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["loaded"] == []
    here = encode_windows(tok, texts, max_length=16, stride=4)
    assert got["input_ids"] == here.input_ids and len(here.windows_of(0)) >= 3
    assert got["merged"] == [tok(t, add_special_tokens=False)["input_ids"] for t in texts]  # merged ids = the text's
    assert got["pooled"] == [16.0, 3.0]


SERVE_LONG_TEXTS = """
import json, sys
from compress.runtime.predictor import Predictor
p = Predictor.load(sys.argv[1], max_length=24, stride=6, pooling="max")
logits = p.logits(json.loads(sys.argv[2]), batch_size=2)
loaded = sorted(m for m in sys.modules if m.split(".")[0] in BLOCKED)
print(json.dumps({"kind": p.kind, "windows": len(p.windows(json.loads(sys.argv[2]))), "logits": logits.tolist(),
                  "loaded": loaded}))
"""


def test_a_served_onnx_artifact_windows_long_texts_as_pytorch_does(classifier, tmp_path):
    """The serving path: an ONNX artifact, in a process where torch cannot be imported, reads a long text
    in the same windows and pools them as the PyTorch model it was exported from."""
    from compress.stages.export import export_onnx
    from compress.runtime.predictor import Predictor
    from tests.support.paths import ROOT
    from tests.support.serving_env import BLOCKER, TRAINING_STACK, blocked_env

    onnx_dir = export_onnx(classifier, tmp_path / "onnx")
    texts = [long_text(66), "a wonderful film", long_text(40, offset=4)]
    done = subprocess.run([sys.executable, "-c", BLOCKER + SERVE_LONG_TEXTS, ",".join(TRAINING_STACK), str(onnx_dir),
                           json.dumps(texts)], capture_output=True, text=True, timeout=120, env=blocked_env(), cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["kind"] == "onnx-fp32" and got["loaded"] == [] and got["windows"] >= len(texts) + 4
    reference = Predictor.load(classifier, max_length=24, stride=6, pooling="max").logits(texts)
    assert np.allclose(np.asarray(got["logits"], dtype=np.float32), reference, atol=1e-4)
