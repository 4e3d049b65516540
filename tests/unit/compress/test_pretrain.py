"""The pretrain stage: continued masked-LM training on unlabelled text, on a tiny BERT."""

from __future__ import annotations

import json

import torch

from compress.cli import main
from compress.stages.pretrain import WholeWordMaskCollator
from tests.conftest import FILLER, NEGATIVE, POSITIVE, make_bert, make_tokenizer, sentiment_rows


def test_collator_masks_whole_words_80_10_10():
    tok = make_tokenizer()
    text = "an unwatchable, overlong melodrama " * 40
    enc = tok(text, truncation=True, max_length=128)
    word_ids = [-1 if w is None else w for w in enc.word_ids()]
    collator = WholeWordMaskCollator(tok, mlm_probability=0.15, seed=0)
    masked = replaced = kept = 0
    for _ in range(200):
        batch = collator([{"input_ids": enc["input_ids"], "word_ids": word_ids}])
        labels, inputs = batch["labels"][0], batch["input_ids"][0]
        chosen = labels != -100
        words = torch.tensor(word_ids)
        # Every piece of a chosen word is chosen; special tokens never are.
        for w in torch.unique(words[chosen]).tolist():
            assert bool(chosen[words == w].all())
        assert not bool(chosen[words < 0].any())
        assert abs(len(torch.unique(words[chosen])) - 0.15 * len(torch.unique(words[words >= 0]))) <= 1
        original = torch.tensor(enc["input_ids"])
        masked += int((inputs[chosen] == tok.mask_token_id).sum())
        kept += int((inputs[chosen] == original[chosen]).sum())
        replaced += int(((inputs[chosen] != tok.mask_token_id) & (inputs[chosen] != original[chosen])).sum())
    total = masked + replaced + kept
    assert 0.76 < masked / total < 0.84 and 0.07 < replaced / total < 0.13 and 0.07 < kept / total < 0.13


def test_pretrain_lowers_the_mlm_loss_and_its_head_fills_masks(tmp_path, capsys):
    from transformers import AutoModelForMaskedLM

    encoder = make_bert(tmp_path / "encoder", layers=2, hidden=32, heads=2, ffn=64)
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(r["text"] for r in sentiment_rows(600, seed=5)), encoding="utf-8")
    out = tmp_path / "mlm"
    rc = main(["pretrain", "--model", str(encoder), "--unlabeled", str(corpus), "--out", str(out), "--epochs", "4",
               "--lr", "3e-3", "--batch-size", "32", "--eval-share", "0.1", "--save-steps", "100000"])
    assert rc == 0, capsys.readouterr().err
    meta = json.loads((out / "compress.json").read_text())
    before, after = meta["metrics"]["eval_mlm_loss_before"], meta["metrics"]["eval_mlm_loss_after"]
    assert before > 9.0  # a random head over a 30,522-word vocabulary
    assert after < 0.5 * before
    assert meta["parent"]["had_mlm_head"] is False and meta["corpus"]["eval_texts"] == 60
    # The saved head reloads with plain transformers and predicts corpus words for a masked slot.
    tok = make_tokenizer()
    model = AutoModelForMaskedLM.from_pretrained(str(out)).eval()
    enc = tok("the movie was [MASK] and the plot", return_tensors="pt")
    at = int((enc["input_ids"][0] == tok.mask_token_id).nonzero()[0])
    with torch.no_grad():
        top = model(**enc).logits[0, at].topk(5).indices.tolist()
    vocabulary = set(FILLER + POSITIVE + NEGATIVE)
    assert all(tok.convert_ids_to_tokens(t) in vocabulary for t in top)


def test_pretrained_encoder_becomes_a_teacher_whose_head_feeds_augmentation(tmp_path, sentiment_csv):
    from compress.stages.teacher import load_teacher
    from compress.stages.transfer import MaskedLMCandidates, candidate_source

    encoder = make_bert(tmp_path / "encoder", layers=2, hidden=32, heads=2, ffn=64)
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(r["text"] for r in sentiment_rows(200, seed=6)), encoding="utf-8")
    assert main(["pretrain", "--model", str(encoder), "--unlabeled", str(corpus), "--data", str(sentiment_csv),
                 "--out", str(tmp_path / "mlm"), "--epochs", "1", "--lr", "1e-3"]) == 0
    meta = json.loads((tmp_path / "mlm" / "compress.json").read_text())
    assert meta["corpus"]["task_train_texts"] > 0
    assert main(["teacher", "--model", str(tmp_path / "mlm"), "--data", str(sentiment_csv), "--out",
                 str(tmp_path / "teacher"), "--epochs", "1", "--lr", "1e-3"]) == 0
    source, why = candidate_source(load_teacher(tmp_path / "teacher"))
    assert isinstance(source, MaskedLMCandidates) and "masked-LM head" in why


def test_pretrain_refuses_a_corpus_too_small(tmp_path, capsys):
    encoder = make_bert(tmp_path / "encoder", layers=1, hidden=16, heads=2, ffn=32)
    corpus = tmp_path / "tiny.txt"
    corpus.write_text("one line\nanother line\n", encoding="utf-8")
    assert main(["pretrain", "--model", str(encoder), "--unlabeled", str(corpus), "--out", str(tmp_path / "o")]) == 2
    assert "only 2 text(s) left" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_pretrain_on_tagging_data_drops_its_held_out_sentences_and_adds_its_training_ones(tmp_path):
    from compress.config import PretrainConfig
    from compress.stages.pretrain import _corpus
    from tests.support.toy_ner import toy_sentences, write_conll

    sentences = toy_sentences(60, seed=3)
    folder = tmp_path / "tagged"
    folder.mkdir()
    for name, part in (("train", sentences[:40]), ("validation", sentences[40:50]), ("test", sentences[50:])):
        write_conll(folder / f"{name}.conll", part)
    leak, seen = " ".join(sentences[45][0]), " ".join(sentences[0][0])
    corpus = tmp_path / "raw.txt"
    corpus.write_text("\n".join(["a fresh line about Paris today", leak, seen]) + "\n", encoding="utf-8")
    cfg = PretrainConfig.from_dict({"model": "minilm", "unlabeled": str(corpus), "data": {"data": str(folder)}})
    texts, stats = _corpus(cfg)
    assert stats["in_validation_or_test"] == 1 and stats["in_training"] == 1 and stats["task_train_texts"] == 40
    assert texts[0] == "a fresh line about Paris today" and leak not in texts and len(texts) == 41


def test_a_corpus_line_past_the_window_is_read_in_windows_not_cut():
    from compress.stages.pretrain import _tokenize

    tok = make_tokenizer()
    long = " ".join(FILLER[i % len(FILLER)] for i in range(70))  # one token a word
    rows = _tokenize(["a good film", long], tok, 24)
    lengths = rows["length"][:]
    assert len(rows) >= 5 and max(lengths) <= 24 and lengths[0] == 5
    pieces = [ids[1:-1] for ids in rows["input_ids"][1:]]
    whole = tok(long, add_special_tokens=False)["input_ids"]
    assert pieces[0] == whole[:22] and pieces[-1] == whole[-len(pieces[-1]):]  # from its first token to its last
    assert sum(len(p) for p in pieces) >= len(whole)
