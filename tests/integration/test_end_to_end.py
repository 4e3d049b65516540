"""Teacher -> soft labels -> distill -> reload, on tiny random BERTs built in the test."""

import json

import pytest
import torch

from compress.cli import main
from compress.config import DataOptions
from compress.stages.distill.intermediate import tokenizations_align
from compress.stages.distill.trainer import DistillConfig, distill
from compress.stages.teacher import TeacherConfig, train_teacher
from compress.stages.training import TrainSettings
from students.factory import StudentSpec
from tests.conftest import make_bert


@pytest.fixture(scope="module")
def trained_teacher(tmp_path_factory):
    """A tiny 4-layer BERT fine-tuned on the learnable sentiment file (shared by this module)."""
    from tests.conftest import sentiment_rows, write_csv

    root = tmp_path_factory.mktemp("e2e")
    data = write_csv(root / "sentiment.csv", sentiment_rows(240))
    encoder = make_bert(root / "encoder")
    cfg = TeacherConfig(model=str(encoder), data=DataOptions(str(data)),
                        train=TrainSettings(epochs=6, lr=2e-3, batch_size=16, logging_steps=1000))
    out = train_teacher(cfg, root / "teacher")
    return out, data


def test_teacher_learns_and_writes_a_complete_artifact(trained_teacher):
    out, _ = trained_teacher
    meta = json.loads((out / "compress.json").read_text())
    assert meta["complete"] and meta["stage"] == "teacher" and meta["fine_tuned"]
    assert meta["metrics"]["test"]["accuracy"] >= 0.9  # one sentiment word decides the label
    assert len(meta["weights_sha256"]) == 64
    assert not (out.parent / "teacher.checkpoints").exists()


def _distill(teacher, data, out, **kw):
    spec = StudentSpec(kw.pop("student", "2x32"), kw.pop("init", "random"))
    train = TrainSettings(epochs=kw.pop("epochs", 4), lr=2e-3, batch_size=16, logging_steps=1000)
    cfg = DistillConfig(teacher=str(teacher), data=DataOptions(str(data)), student=spec, train=train, **kw)
    return distill(cfg, out)


def test_distill_reloads_with_plain_transformers(trained_teacher, tmp_path, capsys):
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    teacher, data = trained_teacher
    out = _distill(teacher, data, tmp_path / "student", student="2x32", init="teacher-layers", epochs=6,
                   intermediate=True)
    meta = json.loads((out / "compress.json").read_text())
    assert meta["distillation"]["intermediate"] is True
    assert meta["distillation"]["layer_map"] == "0:1,1:3"
    assert meta["student"]["copied_teacher_layers"] == {"0": 1, "1": 3}
    model = AutoModelForSequenceClassification.from_pretrained(out)
    tok = AutoTokenizer.from_pretrained(out)
    assert model.config.num_hidden_layers == 2
    # the projections of the intermediate losses are not part of the saved student
    assert not any("projection" in k for k in model.state_dict())
    test = meta["metrics"]["test"]
    assert {"accuracy", "macro_f1", "agreement", "teacher_accuracy"} <= set(test)
    assert test["accuracy"] >= 0.85 and test["agreement"] >= 0.85
    enc = tok(["a wonderful and charming film", "a boring and tedious film"], return_tensors="pt", padding=True)
    with torch.no_grad():
        assert model(**enc).logits.argmax(-1).tolist() == [1, 0]


def test_narrower_student_gets_projections_and_soft_labels_are_reused(trained_teacher, tmp_path, capsys, monkeypatch):
    teacher, data = trained_teacher
    monkeypatch.setenv("BERT_COMPRESS_CACHE", str(tmp_path / "cache"))
    _distill(teacher, data, tmp_path / "a", student="2x16", init="random", epochs=1)
    first = capsys.readouterr().out
    _distill(teacher, data, tmp_path / "b", student="2x16", init="random", epochs=1)
    second = capsys.readouterr().out
    assert "soft labels (train, 192 examples): labelled before training, cached at" in first
    assert "soft labels (train, 192 examples): reusing the cache" in second
    meta = json.loads((tmp_path / "b" / "compress.json").read_text())
    assert meta["distillation"]["soft_labels_reused"] == {"train": True, "validation": True, "test": True}
    assert meta["student"]["shape"]["hidden"] == 16


def test_pretrained_init_keeps_a_uniform_subset_of_layers(trained_teacher, tmp_path):
    teacher, data = trained_teacher
    compact = make_bert(tmp_path / "compact", layers=4, hidden=24, heads=4, ffn=48, seed=3)
    out = _distill(teacher, data, tmp_path / "student", student="2x24", init=f"pretrained:{compact}", epochs=1,
                   intermediate=False)
    meta = json.loads((out / "compress.json").read_text())
    assert meta["student"]["kept_pretrained_layers"] == [1, 3]
    from safetensors.torch import load_file

    saved = load_file(out / "model.safetensors")
    source = load_file(compact / "model.safetensors")
    # the student started from the compact model: its embeddings moved but stayed close
    key = "bert.embeddings.word_embeddings.weight"
    assert saved[key].shape == source["embeddings.word_embeddings.weight"].shape


def test_two_stage_schedule_and_hard_label_ablation(trained_teacher, tmp_path):
    teacher, data = trained_teacher
    out = _distill(teacher, data, tmp_path / "two", student="2x32", init="random", epochs=2, schedule="two-stage",
                   stage1_epochs=1, intermediate=True)
    losses = json.loads((out / "compress.json").read_text())["distillation"]["losses"]
    assert set(losses["stage1"]) == {"embedding", "hidden", "attention"}
    assert set(losses["stage2"]) == {"kd", "hard"}
    out = _distill(teacher, data, tmp_path / "ablation", student="2x32", init="random", epochs=1, alpha_kd=0.0,
                   alpha_hard=1.0, intermediate=False)
    meta = json.loads((out / "compress.json").read_text())
    assert meta["distillation"]["losses"] == {"kd": 0.0, "hard": 1.0}
    assert "agreement" in meta["metrics"]["test"]


def test_two_stage_schedule_without_intermediate_losses_is_refused():
    from compress.config import ConfigError

    with pytest.raises(ConfigError, match="--schedule two-stage trains the intermediate losses first.*--intermediate"):
        DistillConfig(teacher="t", schedule="two-stage", train=TrainSettings(epochs=3)).validate()
    DistillConfig(teacher="t", schedule="two-stage", intermediate=True, train=TrainSettings(epochs=3)).validate()


def test_misaligned_tokenizers_fall_back_to_logits(tokenizer):
    from transformers import BertTokenizerFast
    from tokenizers import BertWordPieceTokenizer
    from tests.conftest import FIXTURES

    cased = BertTokenizerFast(tokenizer_object=BertWordPieceTokenizer(str(FIXTURES / "vocab.txt"), lowercase=False)._tokenizer,
                              unk_token="[UNK]", sep_token="[SEP]", pad_token="[PAD]", cls_token="[CLS]", mask_token="[MASK]")
    texts = ["A Wonderful film", "the plot"]
    a = [tokenizer(t)["input_ids"] for t in texts]
    b = [cased(t)["input_ids"] for t in texts]
    ok, reason = tokenizations_align(tokenizer, cased, a, b)
    assert not ok and "example 0" in reason
    assert tokenizations_align(tokenizer, cased, a[1:], b[1:])[0]


def _interrupt_after_first_checkpoint(monkeypatch) -> list[int]:
    """Make distillation send itself a real SIGINT (what Ctrl-C sends) right after its first checkpoint is
    saved; returns the list that records the step it was sent at.

    The signal is raised in the training's own (main) thread from the Trainer's ``on_save`` event, so
    it always lands while the stage's Ctrl-C handler is installed. (An earlier version sent it from a
    watcher thread polling for the checkpoint, so where it landed depended on thread timing; in about
    one suite run in five the pytest worker running it died.)
    """
    import signal

    import compress.stages.distill.trainer as trainer_module

    real = trainer_module.interrupt_callback
    sent: list[int] = []

    def interrupting():
        stop = real()
        on_save = stop.on_save

        def on_save_then_interrupt(args, state, control, **kwargs):
            control = on_save(args, state, control, **kwargs)
            if not sent:
                sent.append(state.global_step)
                signal.raise_signal(signal.SIGINT)  # handled before this returns: the flag is set, the step finishes
            return control

        stop.on_save = on_save_then_interrupt
        return stop

    monkeypatch.setattr(trainer_module, "interrupt_callback", interrupting)
    return sent


def test_resume_continues_from_a_checkpoint(trained_teacher, tmp_path, capsys, monkeypatch):
    """A distillation stopped by a real SIGINT after its first checkpoint, then resumed with the *same*
    config, continues from that checkpoint and ends with the uninterrupted run's weights.

    The signal arrives as the step-3 checkpoint is saved; the stage's handler lets the next step
    finish, saves it and stops, so the run stops at step 4 (read from the error message). That the
    resumed run trained only the remaining steps is seen in the soft labels it had to compute: every
    batch of this one epoch holds 16 new rows, so a run that restarted would fill all 192. The
    weights must be equal to the bit: resuming restores the weights, optimiser, scheduler, RNG
    states and the data position, and the batches are the same (seeded per epoch), so the same float
    operations run in the same order.
    """
    import re

    from safetensors.torch import load_file

    from compress.core.errors import CompressError
    from compress.stages.training import checkpoint_dir

    teacher, data = trained_teacher
    total, batch = 12, 16  # one epoch of the 192 training rows

    def config(resume=False):
        return DistillConfig(teacher=str(teacher), data=DataOptions(str(data)), student=StudentSpec("2x32", "random"),
                             train=TrainSettings(epochs=1, lr=2e-3, batch_size=batch, save_steps=3, logging_steps=1000),
                             resume=resume)

    # Each run labels its rows before training (nothing cached by other tests is reused).
    monkeypatch.setenv("BERT_COMPRESS_CACHE", str(tmp_path / "cache-full"))
    full = distill(config(), tmp_path / "full")
    full_meta = json.loads((full / "compress.json").read_text())
    assert full_meta["training"]["global_steps"] == total
    assert full_meta["training"]["soft_labels"]["labelled_before_training"] == total * batch
    assert full_meta["training"]["soft_label_rows_filled"] == 0  # logits only: no teacher forward in training

    monkeypatch.setenv("BERT_COMPRESS_CACHE", str(tmp_path / "cache-resumed"))
    out = tmp_path / "student"
    ckpt = checkpoint_dir(out)
    sent = _interrupt_after_first_checkpoint(monkeypatch)
    with pytest.raises(CompressError, match="interrupted at step") as stopped:
        distill(config(), out)
    monkeypatch.undo()  # the resumed run gets no signal (and the cache variable goes with it: set it again)
    monkeypatch.setenv("BERT_COMPRESS_CACHE", str(tmp_path / "cache-resumed"))
    assert sent == [3]
    step = int(re.search(r"interrupted at step (\d+)", str(stopped.value)).group(1))
    assert step == 4, f"stopped at step {step}"
    assert not out.exists()
    assert (ckpt / f"checkpoint-{step}" / "trainer_state.json").is_file()
    capsys.readouterr()

    resumed = distill(config(resume=True), out)
    printed = capsys.readouterr().out
    assert f"resuming from {ckpt / f'checkpoint-{step}'}" in printed
    assert "not resumed" not in printed and "starting from the beginning" not in printed
    meta = json.loads((resumed / "compress.json").read_text())
    assert meta["training"]["global_steps"] == total
    # the interrupted run wrote no cache (it never finished), so the resumed one labels every row again
    assert meta["training"]["soft_labels"]["labelled_before_training"] == total * batch
    assert f"soft labels (train, {total * batch} examples): labelled before training, cached at" in printed
    a, b = load_file(full / "model.safetensors"), load_file(resumed / "model.safetensors")
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), f"{key} differs by {float((a[key] - b[key]).abs().max())}"
    assert meta["metrics"]["test"] == full_meta["metrics"]["test"]


def test_cli_end_to_end_and_errors(trained_teacher, tmp_path, capsys):
    teacher, data = trained_teacher
    rc = main(["distill", "--teacher", str(teacher), "--data", str(data), "--student", "2x32", "--init", "random",
               "--epochs", "1", "--out", str(tmp_path / "s"), "--no-intermediate"])
    assert rc == 0 and (tmp_path / "s" / "compress.json").exists()
    capsys.readouterr()
    assert main(["distill", "--teacher", str(teacher), "--data", str(data), "--student", "9x999",
                 "--out", str(tmp_path / "x"), "--init", "random"]) == 2
    assert "larger than the teacher" in capsys.readouterr().err
    assert main(["distill", "--teacher", str(teacher), "--data", str(data), "--temperature", "0",
                 "--out", str(tmp_path / "x")]) == 2
    assert "--temperature must be > 0" in capsys.readouterr().err
    assert main(["distill", "--teacher", str(tmp_path / "missing"), "--data", str(data), "--out", str(tmp_path / "x")]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


def test_encoder_without_head_cannot_teach(tiny_encoder, sentiment_csv, tmp_path):
    from compress.core.errors import CompressError

    with pytest.raises(CompressError, match="no trained classification head"):
        _distill(tiny_encoder, sentiment_csv, tmp_path / "s")


def test_keep_best_scores_a_classifier_each_epoch_and_writes_its_best(trained_teacher, tmp_path, capsys):
    """``--keep-best`` on sentence classification: teacher and student are scored on validation after every epoch
    (accuracy, long texts pooled) and the model written is the best epoch's, which scores the same again after
    training. Without the flag no epoch is scored (a classifier's runs keep their timings)."""
    teacher, data = trained_teacher
    assert "validation_by_epoch" not in json.loads((teacher / "compress.json").read_text())["training"]
    cfg = TeacherConfig(model=str(make_bert(tmp_path / "encoder")), data=DataOptions(str(data)),
                        train=TrainSettings(epochs=3, lr=2e-3, batch_size=16, logging_steps=1000, keep_best=True))
    student = DistillConfig(teacher=str(teacher), data=DataOptions(str(data)), student=StudentSpec("2x32", "random"),
                            train=TrainSettings(epochs=3, lr=2e-3, batch_size=16, logging_steps=1000, keep_best=True))
    for out in (train_teacher(cfg, tmp_path / "teacher"), distill(student, tmp_path / "student")):
        meta = json.loads((out / "compress.json").read_text())
        epochs = meta["training"]["validation_by_epoch"]
        best = max(epochs, key=lambda e: e["validation_accuracy"])
        assert len(epochs) == 3 and meta["training"]["kept_epoch"]["epoch"] == best["epoch"]
        assert meta["metrics"]["validation"]["accuracy"] == pytest.approx(best["validation_accuracy"], abs=1e-4)
    assert capsys.readouterr().out.count("--keep-best: ") == 2


def test_keep_best_and_tail_averaging_are_not_given_together():
    cfg = DistillConfig(teacher="t", average_tail=0.5, train=TrainSettings(keep_best=True))
    assert [p.keys for p in cfg.problems()] == [("average_tail",)]
    assert "both choose the weights written" in cfg.problems()[0].message
