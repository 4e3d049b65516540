"""Artifact folders: atomic writes, the complete marker, and the model-folder checks."""

import json

import pytest

from compress.core.artifact import check_model_folder, read_meta, write_artifact
from compress.core.errors import CompressError
from compress.runtime.modeling import load_classifier
from tests.conftest import make_bert


def test_write_is_atomic_and_marks_complete(tmp_path):
    out = write_artifact(tmp_path / "a", lambda d: (d / "x.txt").write_text("1"), {"stage": "test"})
    meta = read_meta(out)
    assert meta["complete"] is True and meta["stage"] == "test" and "torch" in meta["versions"]
    # a failing writer leaves the previous artifact untouched and no temporary folder behind
    def broken(d):
        (d / "x.txt").write_text("2")
        raise RuntimeError("disk on fire")
    with pytest.raises(RuntimeError):
        write_artifact(out, broken, {"stage": "test"})
    assert (out / "x.txt").read_text() == "1"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a"]


def test_incomplete_artifact_is_refused(tmp_path):
    folder = make_bert(tmp_path / "m", head=True)
    (folder / "compress.json").write_text(json.dumps({"stage": "distill", "complete": False}))
    with pytest.raises(CompressError, match="incomplete"):
        check_model_folder(folder)


def test_missing_and_empty_folders(tmp_path):
    with pytest.raises(CompressError, match="does not exist"):
        check_model_folder(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(CompressError, match="is empty"):
        check_model_folder(tmp_path / "empty")


def test_config_without_weights(tmp_path):
    folder = make_bert(tmp_path / "m")
    (folder / "model.safetensors").unlink()
    with pytest.raises(CompressError, match="no weights"):
        check_model_folder(folder)


def test_pickle_weights_need_opt_in(tmp_path):
    import torch
    from transformers import AutoModel

    folder = make_bert(tmp_path / "m")
    model = AutoModel.from_pretrained(folder)
    (folder / "model.safetensors").unlink()
    torch.save(model.state_dict(), folder / "pytorch_model.bin")
    with pytest.raises(CompressError, match="--allow-pickle"):
        check_model_folder(folder)
    assert check_model_folder(folder, allow_pickle=True)["model_type"] == "bert"


def test_non_bert_family_is_refused(tmp_path):
    folder = make_bert(tmp_path / "m")
    config = json.loads((folder / "config.json").read_text())
    config["model_type"] = "gpt2"
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(CompressError, match="not a BERT-family encoder"):
        check_model_folder(folder)


def test_tokenizer_missing_or_too_large(tmp_path):
    folder = make_bert(tmp_path / "m")
    for name in ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json"):
        (folder / name).unlink(missing_ok=True)
    with pytest.raises(CompressError, match="no tokenizer files"):
        load_classifier(folder, 2)
    small = tmp_path / "small"
    from transformers import BertConfig, BertModel

    BertModel(BertConfig(vocab_size=1000, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                         intermediate_size=32)).save_pretrained(small)
    from tests.conftest import make_tokenizer

    make_tokenizer().save_pretrained(small)
    with pytest.raises(CompressError, match="do not belong together"):
        load_classifier(small, 2)


def test_head_with_other_label_count_is_refused(tmp_path):
    folder = make_bert(tmp_path / "m", head=True, num_labels=3)
    with pytest.raises(CompressError, match="predicts 3 labels but the data has 2"):
        load_classifier(folder, 2)
