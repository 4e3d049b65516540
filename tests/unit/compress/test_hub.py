"""Models and datasets by Hugging Face Hub name, from a real offline cache built on disk.

``--model org/name`` and ``--data hf:name`` go through ``snapshot_download`` and
``datasets.load_dataset`` with ``HF_HUB_OFFLINE=1``, exactly as on a machine without the hub whose
cache was filled elsewhere; the local-folder safety checks still apply to the snapshots.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from compress.cli import main
from tests.conftest import make_bert, sentiment_rows, write_csv
from tests.support.hf_cache import add_dataset, add_model_snapshot

from tests.support.paths import ROOT
MAIN = "a" * 40  # commit of refs/main
V2 = "b" * 40  # commit of the tag v2


def _sentiment(n: int, seed: int):
    from datasets import ClassLabel, Dataset, Features, Value

    features = Features({"text": Value("string"), "label": ClassLabel(names=["negative", "positive"])})
    return Dataset.from_list(sentiment_rows(n, seed=seed), features=features)


@pytest.fixture(scope="module")
def hf(tmp_path_factory):
    """A Hugging Face home whose caches hold tiny models and datasets, as if downloaded before."""
    import torch

    root = tmp_path_factory.mktemp("hf")
    hub, data = root / "home" / "hub", root / "home" / "datasets"
    src = root / "src"
    add_model_snapshot(hub, "org/tiny-bert", make_bert(src / "main", layers=4, seed=0), MAIN)
    add_model_snapshot(hub, "org/tiny-bert", make_bert(src / "v2", layers=2, seed=1), V2, refs=("v2",))
    pickled = make_bert(src / "pickled", layers=1)
    from safetensors.torch import load_file

    torch.save(load_file(pickled / "model.safetensors"), pickled / "pytorch_model.bin")
    (pickled / "model.safetensors").unlink()
    add_model_snapshot(hub, "org/pickled", pickled, MAIN)
    gpt = make_bert(src / "gpt", layers=1)
    config = json.loads((gpt / "config.json").read_text())
    (gpt / "config.json").write_text(json.dumps({**config, "model_type": "gpt2"}))
    add_model_snapshot(hub, "org/gpt", gpt, MAIN)
    # A BERT whose config points at remote code that, if it ever ran, would leave a marker file.
    remote = make_bert(src / "remote", layers=1, head=True)
    marker = root / "REMOTE_CODE_RAN"
    config = json.loads((remote / "config.json").read_text())
    config.update(architectures=["BertForSequenceClassification"],
                  auto_map={"AutoConfig": "configuration_evil.EvilConfig",
                            "AutoModelForSequenceClassification": "modeling_evil.EvilModel"})
    (remote / "config.json").write_text(json.dumps(config))
    for name in ("configuration_evil.py", "modeling_evil.py"):
        (remote / name).write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
    add_model_snapshot(hub, "org/remote-code", remote, MAIN)

    add_dataset(data, "org/tiny-sentiment", {"train": _sentiment(200, 0), "test": _sentiment(40, 1)})
    add_dataset(data, "pairs-only-train", {"train": _sentiment(100, 2)})
    return {"root": root, "hub": hub, "data": data, "marker": marker}


@pytest.fixture
def offline_hf(hf, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(hf["hub"]))
    monkeypatch.setenv("HF_DATASETS_CACHE", str(hf["data"]))
    return hf


def _meta(folder: Path) -> dict:
    return json.loads((folder / "compress.json").read_text())


def test_teacher_and_student_from_hub_names_offline(offline_hf, tmp_path, capsys):
    rc = main(["teacher", "--model", "org/tiny-bert", "--data", "hf:org/tiny-sentiment", "--out", str(tmp_path / "t"),
               "--epochs", "6", "--lr", "2e-3", "--batch-size", "16"])
    assert rc == 0, capsys.readouterr().err
    meta = _meta(tmp_path / "t")
    assert meta["parent"]["repo_id"] == "org/tiny-bert" and meta["parent"]["commit"] == MAIN
    assert meta["data"]["source"] == "hf:org/tiny-sentiment"
    assert meta["data"]["label_names"] == ["negative", "positive"]  # from the ClassLabel feature
    # train and test came from the hub; validation was carved out of train (10%, seeded)
    assert meta["data"]["sizes"] == {"train": 180, "validation": 20, "test": 40}
    assert meta["metrics"]["test"]["accuracy"] >= 0.9
    capsys.readouterr()
    # the bare id works as well as hf:NAME; the student sees the same splits
    rc = main(["distill", "--teacher", str(tmp_path / "t"), "--data", "org/tiny-sentiment", "--student", "1x32",
               "--init", "random", "--epochs", "1", "--out", str(tmp_path / "s"), "--no-intermediate"])
    assert rc == 0, capsys.readouterr().err
    assert _meta(tmp_path / "s")["data"]["fingerprint"] == meta["data"]["fingerprint"]


def test_revision_pins_a_snapshot(offline_hf, tmp_path, capsys):
    from compress.core.assets import resolve_model

    snapshots = offline_hf["hub"] / "models--org--tiny-bert" / "snapshots"
    assert resolve_model("org/tiny-bert") == snapshots / MAIN
    assert resolve_model("org/tiny-bert", revision="v2") == snapshots / V2
    assert resolve_model("org/tiny-bert", revision=MAIN) == snapshots / MAIN
    data = write_csv(tmp_path / "d.csv", sentiment_rows(60))
    rc = main(["teacher", "--model", "org/tiny-bert", "--revision", "v2", "--data", str(data), "--max-steps", "1",
               "--out", str(tmp_path / "t")])
    assert rc == 0, capsys.readouterr().err
    meta = _meta(tmp_path / "t")
    assert meta["parent"]["commit"] == V2 and meta["config"]["revision"] == "v2"
    from transformers import AutoConfig

    assert AutoConfig.from_pretrained(tmp_path / "t").num_hidden_layers == 2  # the v2 model, not main's 4 layers
    capsys.readouterr()
    assert main(["teacher", "--model", "org/tiny-bert", "--revision", "v3", "--data", str(data),
                 "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err
    assert "model 'org/tiny-bert' (revision 'v3') is not a local path and is not in the Hugging Face cache" in err
    assert main(["teacher", "--model", str(snapshots / MAIN), "--revision", "v2", "--data", str(data),
                 "--out", str(tmp_path / "x")]) == 2
    assert "--revision v2 applies only to a Hugging Face Hub id" in capsys.readouterr().err


def test_safety_checks_apply_to_hub_snapshots(offline_hf, tmp_path, capsys):
    from compress.core.assets import resolve_model
    from compress.runtime.modeling import load_classifier

    data = write_csv(tmp_path / "d.csv", sentiment_rows(60))
    for repo, expected in (("org/pickled", "holds only pickle weights"), ("org/gpt", "is not a BERT-family encoder")):
        assert main(["teacher", "--model", repo, "--data", str(data), "--out", str(tmp_path / "x")]) == 2
        err = capsys.readouterr().err
        assert f"model '{repo}'" in err and expected in err and "Traceback" not in err
    assert not (tmp_path / "x").exists()
    # pickle weights only when asked for, and then with weights_only=True
    model, _, _ = load_classifier(resolve_model("org/pickled", allow_pickle=True), 2, allow_pickle=True)
    assert model.config.num_hidden_layers == 1
    # a config that names remote code loads the built-in BERT class; the code never runs
    model, _, has_head = load_classifier(resolve_model("org/remote-code"), 2)
    assert type(model).__name__ == "BertForSequenceClassification" and has_head
    rc = main(["teacher", "--model", "org/remote-code", "--data", str(data), "--max-steps", "1",
               "--out", str(tmp_path / "r")])
    assert rc == 0, capsys.readouterr().err
    assert not offline_hf["marker"].exists(), "trust_remote_code must never be enabled"


def test_offline_and_not_cached_is_one_line(offline_hf, tmp_path, capsys):
    data = write_csv(tmp_path / "d.csv", sentiment_rows(60))
    assert main(["teacher", "--model", "org/not-cached", "--data", str(data), "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "Traceback" not in err
    assert "model 'org/not-cached' is not a local path and is not in the Hugging Face cache" in err
    assert str(offline_hf["hub"]) in err and "HF_HUB_OFFLINE=1" in err and "HF_HUB_CACHE" in err
    assert main(["teacher", "--model", "org/tiny-bert", "--data", "hf:org/not-cached", "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "Traceback" not in err
    assert "dataset 'org/not-cached' is not a local path and is not in the Hugging Face cache" in err
    assert str(offline_hf["data"]) in err and "HF_DATASETS_CACHE" in err
    # a mistyped local file is still reported as a missing file, not looked up on the hub
    assert main(["teacher", "--model", "org/tiny-bert", "--data", "nope.csv", "--out", str(tmp_path / "x")]) == 2
    assert "neither a built-in dataset" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


def test_hub_dataset_splits_configs_and_checks(offline_hf, tmp_path):
    from datasets import Dataset

    from compress.tasks.tables import load_task_data
    from compress.core.errors import CompressError

    # only a train split: the seeded 80/10/10 split of a single file
    task = load_task_data("hf:pairs-only-train")
    assert task.sizes() == {"train": 80, "validation": 10, "test": 10}
    assert load_task_data("hf:pairs-only-train").fingerprint == task.fingerprint
    assert load_task_data("hf:pairs-only-train", seed=1).fingerprint != task.fingerprint

    cache = offline_hf["root"] / "configs"
    rows = sentiment_rows(60)
    named = Dataset.from_list([{"sentence": r["text"], "sentiment": ["neg", "pos"][r["label"]]} for r in rows])
    unknown = Dataset.from_list([{"sentence": "a film", "sentiment": "neutral"}] * 5)
    add_dataset(cache, "org/glue-like", {"train": named, "dev": named.select(range(20))}, config="sst")
    add_dataset(cache, "org/glue-like", {"train": named, "validation": unknown}, config="bad")
    os.environ["HF_DATASETS_CACHE"] = str(cache)  # the fixture's monkeypatch restores it
    with pytest.raises(CompressError, match=r"several configurations.*--data hf:org/glue-like:CONFIG"):
        load_task_data("hf:org/glue-like", text_column="sentence", label_column="sentiment")
    with pytest.raises(CompressError, match=r"no column 'text' \(columns: sentence, sentiment\)"):
        load_task_data("hf:org/glue-like:sst")
    # the same label validation as a local file, naming the split
    with pytest.raises(CompressError, match=r"hf:org/glue-like:bad\[validation\]: column 'sentiment' has classes "
                                            r"\['neutral'\] that never occur in the training data"):
        load_task_data("hf:org/glue-like:bad", text_column="sentence", label_column="sentiment")
    task = load_task_data("hf:org/glue-like:sst", text_column="sentence", label_column="sentiment")
    assert task.label_names == ["neg", "pos"] and task.source == "hf:org/glue-like:sst"
    assert task.sizes() == {"train": 54, "validation": 20, "test": 6}  # dev is the validation split
    with pytest.raises(CompressError, match="config 'nope'"):
        load_task_data("hf:org/glue-like:nope", text_column="sentence", label_column="sentiment")


def test_glue_style_unlabelled_test_split_is_left_out(offline_hf):
    from datasets import ClassLabel, Dataset, Features, Value

    from compress.tasks.tables import load_task_data

    features = Features({"sentence": Value("string"), "label": ClassLabel(names=["neg", "pos"])})
    rows = [{"sentence": r["text"], "label": r["label"]} for r in sentiment_rows(100)]
    unlabelled = [{"sentence": r["sentence"], "label": -1} for r in rows[:10]]
    cache = offline_hf["root"] / "glue"
    add_dataset(cache, "nyu/glue", {"train": Dataset.from_list(rows, features=features),
                                    "validation": Dataset.from_list(rows[:20], features=features),
                                    "test": Dataset.from_list(unlabelled, features=features)}, config="sst2")
    os.environ["HF_DATASETS_CACHE"] = str(cache)
    task = load_task_data("hf:nyu/glue:sst2", text_column="sentence")
    assert task.label_names == ["neg", "pos"]
    # test had no labels (-1): left out, and carved from train instead; validation kept as given
    assert task.sizes() == {"train": 90, "validation": 20, "test": 10}
    assert any("no labels" in note for note in task.notes)


# ----------------------------------------------------------------------------- the network policy


class _Probe:
    """A TCP listener that counts connections: an HF_ENDPOINT that records any attempt to reach it."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.sock.settimeout(0.2)
        self.connections = 0
        self.running = True
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}"

    def _serve(self):
        while self.running:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.connections += 1
            conn.close()

    def close(self):
        self.running = False
        self.thread.join()
        self.sock.close()


def _online_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE",
                                                            "HF_DATASETS_OFFLINE")}
    return {**env, "OMP_NUM_THREADS": "1", **extra}


def _local_model_and_data(tmp_path: Path) -> tuple[Path, Path]:
    model = make_bert(tmp_path / "local", layers=1, head=True)
    config = json.loads((model / "config.json").read_text())
    (model / "config.json").write_text(json.dumps({**config, "architectures": ["BertForSequenceClassification"]}))
    return model, write_csv(tmp_path / "d.csv", sentiment_rows(40))


def _count_connections(tmp_path: Path, argv: list[str]) -> int:
    probe = _Probe()
    try:
        env = _online_env(HF_ENDPOINT=probe.url, HF_HOME=str(tmp_path / "hf-home"))
        run = subprocess.run([sys.executable, *argv], cwd=ROOT, env=env, capture_output=True, text=True, timeout=400)
        assert run.returncode == 0, run.stderr[-2000:]
    finally:
        probe.close()
    return probe.connections


@pytest.mark.slow  # a subprocess: importing torch and transformers alone takes most of a minute on 2 busy cores
def test_without_offline_mode_a_local_teacher_run_never_contacts_the_hub(tmp_path):
    model, data = _local_model_and_data(tmp_path)
    argv = ["-m", "compress", "teacher", "--model", str(model), "--data", str(data), "--finetune", "yes",
            "--max-steps", "1", "--out", str(tmp_path / "t")]
    assert _count_connections(tmp_path, argv) == 0, "a local model and a local file must not touch the hub"


def test_online_but_unreachable_falls_back_to_the_cache(hf, tmp_path):
    # a closed port: every connection is refused at once, as on a machine whose hub is blocked
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    env = _online_env(HF_ENDPOINT=f"http://127.0.0.1:{port}", HF_HUB_CACHE=str(hf["hub"]),
                      HF_HOME=str(tmp_path / "hf-home"))
    code = ("import sys\nfrom compress.core.assets import resolve_model\nfrom compress.core.errors import CompressError\n"
            "print(resolve_model('org/tiny-bert'))\n"
            "try:\n    resolve_model('org/absent')\nexcept CompressError as e:\n    print('ERROR', e)\n")
    run = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    first, second = run.stdout.strip().splitlines()[-2:]
    assert first.endswith(f"models--org--tiny-bert/snapshots/{MAIN}")
    assert second.startswith("ERROR model 'org/absent' is not a local path") and "could not be reached" in second
