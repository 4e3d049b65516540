"""The task registry, and word-level labels/logits over sub-tokens across two different tokenizers."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from compress.core.errors import CompressError
from compress.tasks import Task, get_task, register_task, task_for_architectures, task_names, unregister_task
from compress.tasks.token_classification.alignment import IGNORE_INDEX, batch_word_logits, first_subtokens, label_positions, word_logits
from tests.conftest import FIXTURES, make_tokenizer

from tests.support.paths import ROOT


def test_both_tasks_are_registered_with_what_the_stages_need():
    assert task_names()[:2] == ["sequence-classification", "token-classification"]
    seq, tok = get_task("sequence-classification"), get_task("token-classification")
    assert get_task("ner") is tok and get_task("text-classification") is seq
    assert (seq.auto_model, tok.auto_model) == ("AutoModelForSequenceClassification", "AutoModelForTokenClassification")
    assert seq.outputs == {"logits": ("batch", "num_labels")}
    assert tok.outputs == {"logits": ("batch", "sequence", "num_labels")}
    assert (seq.label_unit, tok.label_unit) == ("example", "word") and tok.soft_labels == ("words", "num_labels")
    assert tok.primary_metric == "entity_f1" and "per_type_f1" in tok.metrics
    assert tok.predictor_returns == ("entities", "word_tags") and seq.predictor_returns == ("label", "probabilities")
    # The export's dynamic axes: the sequence-classification ones are what compress/stages/export.py writes today.
    names = ["input_ids", "attention_mask", "token_type_ids"]
    assert seq.dynamic_axes(names)["logits"] == {0: "batch"}
    assert tok.dynamic_axes(names)["logits"] == {0: "batch", 1: "sequence"}
    assert tok.dynamic_axes(names)["input_ids"] == {0: "batch", 1: "sequence"}
    with pytest.raises(CompressError, match="unknown task 'qa'. Known tasks: sequence-classification, "
                                            "token-classification"):
        get_task("qa")


def test_heads_are_told_apart_by_architecture():
    assert task_for_architectures(["BertForTokenClassification"]).name == "token-classification"
    assert task_for_architectures(["MPNetForSequenceClassification"]).name == "sequence-classification"
    assert task_for_architectures(["DistilBertForTokenClassification"]).name == "token-classification"
    assert task_for_architectures(["BertModel"]) is None and task_for_architectures(None) is None


def test_a_toy_task_is_one_registration():
    toy = Task(name="toy-regression", description="one number per text", auto_model="AutoModelForSequenceClassification",
               head_suffix="ForToyRegression", inputs={"input_ids": ("batch", "sequence")},
               outputs={"logits": ("batch", "num_labels")}, label_unit="example", soft_labels=("examples", "num_labels"),
               metrics=("mse",), primary_metric="mse", predictor_returns=("value",),
               score=lambda pred, gold: {"mse": float(np.mean((np.asarray(pred) - np.asarray(gold)) ** 2))})
    register_task(toy)
    try:
        assert get_task("toy-regression").score([1.0, 3.0], [1.0, 1.0]) == {"mse": 2.0}
        assert task_for_architectures(["BertForToyRegression"]) is toy
        with pytest.raises(CompressError, match="'toy-regression' is already registered"):
            register_task(toy)
        with pytest.raises(CompressError, match="'ner' is already registered"):
            register_task(Task(**{**toy.__dict__, "name": "other", "aliases": ("ner",)}))
    finally:
        unregister_task("toy-regression")
    assert "toy-regression" not in task_names()
    with pytest.raises(CompressError, match="primary metric 'f1' is not among its metrics"):
        register_task(Task(**{**toy.__dict__, "name": "bad", "primary_metric": "f1"}))


def test_the_registry_and_the_tagging_helpers_import_no_torch():
    code = ("import sys, compress.tasks, compress.tasks.token_classification.data, compress.tasks.token_classification.metrics, "
            "compress.tasks.token_classification.alignment\n"
            "heavy = sorted(m for m in ('torch', 'transformers', 'datasets', 'pandas') if m in sys.modules)\n"
            "assert not heavy, heavy")
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_sequence_classification_score_is_the_stages_score():
    from compress.runtime.modeling import classification_metrics

    rng = np.random.RandomState(0)
    logits, reference, labels = rng.randn(200, 3), rng.randn(200, 3), rng.randint(0, 3, 200)
    assert get_task("sequence-classification").score(logits, labels, reference) == \
        classification_metrics(logits, labels, reference_logits=reference)


def test_token_classification_score_names_its_metrics():
    gold = [["B-person", "I-person", "O"], ["B-location"]]
    pred = [["B-person", "I-person", "O"], ["O"]]
    out = get_task("ner").score(pred, gold, reference=pred)
    assert set(get_task("ner").metrics) <= set(out)
    assert out["entity_f1"] == pytest.approx(2 / 3) and out["per_type_f1"] == {"location": 0.0, "person": 1.0}
    assert out["token_accuracy"] == 0.75 and out["token_agreement"] == 1.0


def test_model_class_resolves_lazily_and_builds_the_declared_output_shape():
    import torch
    from transformers import BertConfig

    config = BertConfig(vocab_size=30522, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=32, num_labels=5)
    ids = torch.tensor([[101, 2000, 2001, 102]])
    for name in task_names()[:2]:
        task = get_task(name)
        model = task.model_class().from_config(config).eval()
        assert task.has_head([type(model).__name__])
        logits = model(input_ids=ids).logits
        axes = task.outputs["logits"]
        assert logits.ndim == len(axes) and logits.shape[-1] == 5
        assert logits.shape[:-1] == ((1, 4) if "sequence" in axes else (1,))


# ----------------------------------------------------------------------------- alignment

WORDS = ["Gurez", "sector", "\u200b", "ANI", "wonderful", "@paulwalk", "New York"]  # \u200b: no sub-token at all
LABELS = [1, 2, 0, 3, 0, 0, 4]


def _char_tokenizer():
    """A second, very different WordPiece tokenizer: single characters only (~2,000 pieces), so
    every word is split into many more sub-tokens than by bert-base-uncased's vocabulary."""
    from tokenizers import BertWordPieceTokenizer
    from transformers import BertTokenizerFast

    chars = sorted({w for w in (FIXTURES / "vocab.txt").read_text(encoding="utf-8").splitlines() if len(w) == 1})
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    vocab = {t: i for i, t in enumerate(specials + chars + ["##" + c for c in chars])}
    wp = BertWordPieceTokenizer(vocab, lowercase=True)
    tok = BertTokenizerFast(tokenizer_object=wp._tokenizer, unk_token="[UNK]", sep_token="[SEP]", pad_token="[PAD]",
                            cls_token="[CLS]", mask_token="[MASK]", model_max_length=128)
    assert tok.convert_ids_to_tokens(tok("ab")["input_ids"]) == ["[CLS]", "a", "##b", "[SEP]"]
    return tok


@pytest.fixture(scope="module")
def tokenizers():
    return {"bert-base-uncased": make_tokenizer(), "characters": _char_tokenizer()}


def test_labels_sit_on_the_first_sub_token(tokenizers):
    tok = tokenizers["bert-base-uncased"]
    enc = tok(WORDS, is_split_into_words=True)
    pieces = tok.convert_ids_to_tokens(enc["input_ids"])
    assert pieces[:4] == ["[CLS]", "gu", "##re", "##z"] and "[UNK]" not in pieces  # the real vocabulary
    labels = label_positions(enc.word_ids(), LABELS)
    assert labels == [IGNORE_INDEX, 1, IGNORE_INDEX, IGNORE_INDEX, 2, 3, IGNORE_INDEX, 0, 0, IGNORE_INDEX,
                      IGNORE_INDEX, 4, IGNORE_INDEX, IGNORE_INDEX]
    assert first_subtokens(enc.word_ids(), len(WORDS)).tolist() == [1, 4, -1, 5, 7, 8, 11]


def _token_logits(word_ids, n_words: int, rng) -> np.ndarray:
    """What a model that "knows" each word would give: at a word's first sub-token the word's own
    row (word index, word length), noise on every other sub-token and special token."""
    out = rng.randn(len(word_ids), 2).astype(np.float32) + 100
    for word in range(n_words):
        if word in word_ids:  # list.index: the first token of the word, found independently of the helper
            out[list(word_ids).index(word)] = (word, len(WORDS[word]))
    return out


def test_word_logits_line_up_across_two_tokenizers(tokenizers):
    rng = np.random.RandomState(0)
    gathered = {}
    for name, tok in tokenizers.items():
        ids = tok(WORDS, is_split_into_words=True).word_ids()
        logits, present = word_logits(_token_logits(ids, len(WORDS), rng), ids, len(WORDS))
        placed = [lab for lab in label_positions(ids, LABELS) if lab != IGNORE_INDEX]
        assert placed == [lab for lab, p in zip(LABELS, present) if p], name
        gathered[name] = (len(ids), logits, present)
    (n_bert, bert, bert_present), (n_char, char, char_present) = gathered.values()
    assert n_char > 2 * n_bert  # really different tokenizations of the same words...
    assert bert.shape == char.shape == (len(WORDS), 2)  # ...give one row per word all the same,
    np.testing.assert_array_equal(bert, char)  # row for row
    assert bert_present.tolist() == char_present.tolist() == [True, True, False, True, True, True, True]
    assert bert[:, 0].tolist() == [0, 1, 0, 3, 4, 5, 6]  # the absent word's row is 0


def test_batches_and_truncation(tokenizers):
    tok = tokenizers["characters"]
    sentences = [WORDS, ["Ann", "Lee"]]
    enc = tok(sentences, is_split_into_words=True, truncation=True, max_length=12, padding=True)
    ids = [enc.word_ids(i) for i in range(len(sentences))]
    rng = np.random.RandomState(1)
    batch = np.stack([_token_logits(i, len(s), rng) for i, s in zip(ids, sentences)])
    (first, first_present), (second, second_present) = batch_word_logits(batch, ids, [len(s) for s in sentences])
    # 12 tokens hold [CLS] + gurez (5) + sector (6 cut to 5) + [SEP]: words from the third on are cut off.
    assert first_present.tolist() == [True, True, False, False, False, False, False]
    assert second_present.tolist() == [True, True] and second.shape == (2, 2)
    assert label_positions(ids[0], LABELS).count(IGNORE_INDEX) == 10
    with pytest.raises(ValueError, match="do not cover"):
        word_logits(np.zeros((3, 2)), ids[0], len(WORDS))
