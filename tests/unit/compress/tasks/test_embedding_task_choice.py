"""Which task a stage runs when its model is a sentence encoder (``compress.tasks.task_choice.stage_task``): the
model claims ``sentence-embedding`` only where the data alone would not say otherwise for sure."""

from __future__ import annotations

import json

import pytest

from compress.tasks.task_choice import stage_task
from conftest import sentiment_rows, write_csv
from tests.support.embedding import corpus, make_st_folder
from tests.support.similarity import scored_pairs, write_pairs


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("choice")
    text = tmp / "domain.txt"
    text.write_text("\n".join(corpus(20)), encoding="utf-8")
    return {"st": make_st_folder(tmp / "st", hidden=16, layers=1), "text": str(text),
            "pairs": str(write_pairs(tmp / "pairs.csv", scored_pairs(20))),
            "labelled": str(write_csv(tmp / "sentiment.csv", sentiment_rows(20))), "tmp": tmp}


def test_a_sentence_transformers_folder_claims_text_and_scored_pairs(files):
    st = str(files["st"])
    assert stage_task(files["text"], model=st) == "sentence-embedding"
    assert stage_task(files["pairs"], model=st) == "sentence-embedding"
    # a labelled table keeps it an encoder under a new classification head, as before
    assert stage_task(files["labelled"], model=st) == "sequence-classification"


def test_a_built_in_sentence_model_claims_unlabelled_text_only(files):
    assert stage_task(files["text"], model="minilm") == "sentence-embedding"
    assert stage_task(files["pairs"], model="mpnet-base") == "sentence-similarity"  # the cross-encoder's encoder
    assert stage_task(files["labelled"], model="minilm") == "sequence-classification"


def test_a_built_in_sentence_model_used_as_it_is_claims_scored_pairs(files):
    """``teacher --model mpnet-base --finetune no`` on pairs: the published two-tower model, scored as it is
    (recipes/embedding.yaml); a bare encoder has no trained cross-encoder head to keep."""
    assert stage_task(files["pairs"], model="mpnet-base", as_is=True) == "sentence-embedding"
    assert stage_task("stsb-captions", model="mpnet-base", as_is=True) == "sentence-embedding"
    assert stage_task("stsb-captions", model="mpnet-base") == "sentence-similarity"  # recipes/similarity.yaml
    assert stage_task(files["labelled"], model="mpnet-base", as_is=True) == "sequence-classification"


def test_an_artifact_of_the_task_claims_it_and_others_follow_their_data(files):
    artifact = files["tmp"] / "artifact"
    artifact.mkdir()
    (artifact / "compress.json").write_text(json.dumps({"task": "two-tower", "complete": True}), encoding="utf-8")
    assert stage_task(files["labelled"], model=str(artifact)) == "sentence-embedding"  # an alias read as the name
    (artifact / "compress.json").write_text(json.dumps({"task": "sentence-similarity", "complete": True}),
                                            encoding="utf-8")
    assert stage_task(files["labelled"], model=str(artifact)) == "sequence-classification"
    assert stage_task(files["pairs"]) == "sentence-similarity" and stage_task(files["text"], model=None) == \
        "sequence-classification"
