"""The catalogue of bad inputs, through the command line as a user meets them: each gives a
non-zero exit, one message naming the file or option and the fix, and no traceback (docs/guide.md's
"Bad input" table lists these messages)."""

import json

import pytest
import torch

from compress.cli import main
from tests.conftest import make_bert, sentiment_rows, write_csv


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("catalogue")
    data = write_csv(root / "data.csv", sentiment_rows(60))
    write_csv(root / "balanced.csv", sentiment_rows(240))  # 24 validation rows: enough to tell a head from chance
    teacher = make_bert(root / "teacher", layers=2, head=True)
    cfg = json.loads((teacher / "config.json").read_text())
    (teacher / "config.json").write_text(json.dumps({**cfg, "architectures": ["BertForSequenceClassification"]}))
    (root / "empty").mkdir()
    no_weights = make_bert(root / "no-weights")
    (no_weights / "model.safetensors").unlink()
    gpt = make_bert(root / "gpt")
    (gpt / "config.json").write_text(json.dumps({**cfg, "model_type": "gpt2"}))
    no_tok = make_bert(root / "no-tokenizer", head=True)
    for name in ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json"):
        (no_tok / name).unlink(missing_ok=True)
    write_csv(root / "nolabel.csv", [{"text": r["text"]} for r in sentiment_rows(20)])
    write_csv(root / "notext.csv", [{"review": r["text"], "label": r["label"]} for r in sentiment_rows(20)])
    write_csv(root / "range.csv", [dict(r, label=5 if i == 0 else r["label"]) for i, r in enumerate(sentiment_rows(20))])
    write_csv(root / "mixed.csv", [dict(r, label="pos" if i == 0 else r["label"]) for i, r in enumerate(sentiment_rows(20))])
    write_csv(root / "single.csv", [dict(r, label=1) for r in sentiment_rows(20)])
    (root / "empty.csv").write_text("text,label\n")
    (root / "gates.toml").write_text("[rules]\nmin_speed = 2\n")
    (root / "good.toml").write_text("[rules]\nmin_agreement = 0.9\n")
    (root / "results.json").write_text(json.dumps({"schema": "bert-compress-bench", "schema_version": 99}))
    return root, data, teacher


def _distill(teacher, data, out, *extra):
    return ["distill", "--teacher", str(teacher), "--data", str(data), "--out", str(out), "--init", "random",
            "--student", "1x32", *extra]


CASES = {
    "missing model folder": (lambda r, d, t: ["teacher", "--model", str(r / "nope"), "--data", str(d), "--out", str(r / "o")],
                             "does not exist"),
    "empty model folder": (lambda r, d, t: ["teacher", "--model", str(r / "empty"), "--data", str(d), "--out", str(r / "o")],
                           "is empty"),
    "config but no weights": (lambda r, d, t: ["teacher", "--model", str(r / "no-weights"), "--data", str(d),
                                               "--out", str(r / "o")], "no weights"),
    "non-BERT-family config": (lambda r, d, t: ["teacher", "--model", str(r / "gpt"), "--data", str(d),
                                                "--out", str(r / "o")], "not a BERT-family encoder"),
    "tokenizer missing": (lambda r, d, t: _distill(r / "no-tokenizer", d, r / "o"), "no tokenizer files"),
    "dataset missing": (lambda r, d, t: _distill(t, r / "nope.csv", r / "o"), "neither a built-in dataset"),
    "dataset empty": (lambda r, d, t: _distill(t, r / "empty.csv", r / "o"), "no rows"),
    "text column missing": (lambda r, d, t: _distill(t, r / "notext.csv", r / "o"), "--text-column"),
    "label column missing": (lambda r, d, t: _distill(t, r / "nolabel.csv", r / "o"), "--label-column"),
    "labels out of range": (lambda r, d, t: _distill(t, r / "range.csv", r / "o"), "predicts 2 labels but the data has 3 classes (0, 1, 5)"),
    "mixed label types": (lambda r, d, t: _distill(t, r / "mixed.csv", r / "o"), "holds numbers, but 'pos' at line 2 is text"),
    "a single class": (lambda r, d, t: _distill(t, r / "single.csv", r / "o"), "single class"),
    "student wider than the teacher": (lambda r, d, t: _distill(t, d, r / "o", "--student", "2x64"), "larger than the teacher"),
    "unknown student preset": (lambda r, d, t: _distill(t, d, r / "o", "--student", "huge"), "neither a preset"),
    "temperature <= 0": (lambda r, d, t: _distill(t, d, r / "o", "--temperature", "-1"), "--temperature must be > 0"),
    "pruning ratio outside [0, 1)": (lambda r, d, t: ["prune", "--model", str(t), "--data", str(d), "--heads", "1.0",
                                                       "--out", str(r / "o")], "--heads"),
    "gates file with an unknown rule": (lambda r, d, t: ["gate", str(r / "results.json"), "--rules", str(r / "gates.toml")],
                                        "min_speed"),
    "hub model offline and not cached": (lambda r, d, t: ["teacher", "--model", "org/not-cached", "--data", str(d),
                                                           "--out", str(r / "o")],
                                         "model 'org/not-cached' is not a local path and is not in the Hugging Face cache"),
    "hub dataset offline and not cached": (lambda r, d, t: _distill(t, "hf:org/not-cached", r / "o"),
                                           "dataset 'org/not-cached' is not a local path and is not in the Hugging Face cache"),
    "a head at chance under --finetune no": (lambda r, d, t: ["teacher", "--model", str(t), "--data",
                                                               str(r / "balanced.csv"), "--finetune", "no",
                                                               "--out", str(r / "o")], "never trained for this task"),
    "teacher no better than chance": (lambda r, d, t: _distill(t, r / "balanced.csv", r / "o"), "no better than chance"),
    "results file of another schema version": (lambda r, d, t: ["gate", str(r / "results.json"), "--rules",
                                                                str(r / "good.toml")], "schema_version"),
    "--device that is not a device": (lambda r, d, t: _distill(t, d, r / "o", "--device", "gpu"),
                                      "--device 'gpu' is not a device; use auto, cpu, cuda or cuda:N"),
}
if not torch.cuda.is_available():  # with a GPU, --device cuda is simply used
    CASES["--device cuda where torch sees no GPU"] = (lambda r, d, t: _distill(t, d, r / "o", "--device", "cuda"),
                                                      "torch sees no CUDA device")


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_input_is_one_clear_message(files, case, capsys, monkeypatch):
    root, data, teacher = files
    # hub names resolve offline against empty caches of this test's own
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(root / "hf" / "hub"))
    monkeypatch.setenv("HF_DATASETS_CACHE", str(root / "hf" / "datasets"))
    argv, expected = CASES[case]
    code = main(argv(root, data, teacher))
    err = capsys.readouterr().err
    assert code in (2, 3), err
    assert expected in err, err
    assert "Traceback" not in err
    assert not (root / "o").exists()  # nothing half-written
