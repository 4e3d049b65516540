"""Continued masked-LM pre-training on unlabelled in-domain text (``bert-compress pretrain``).

A general-purpose encoder has seen little text like the task's. A pass of masked-LM training on
in-domain sentences (domain- and task-adaptive pre-training) gives the teacher that knowledge
before it is fine-tuned, and leaves a masked-LM head that ``distill --augment`` uses for
TinyBERT-style word replacements (``compress.stages.transfer`` finds it through the teacher's parent).

Masking is BERT's: about ``mlm_probability`` of the words of each sequence are chosen (whole
words: every word piece of a chosen word together), and of their tokens 80% become the mask token,
10% a random token and 10% stay as they are; the choice is drawn anew for every batch (dynamic
masking, as RoBERTa), so each epoch sees other masks. transformers' own whole-word collator drops
the 80/10/10 split, hence :class:`WholeWordMaskCollator`.

The output folder is a ``save_pretrained`` masked-LM (encoder + head) with its tokenizer and
``compress.json`` (the held-out masked-LM loss before and after); ``bert-compress teacher --model
DIR`` fine-tunes it like any encoder.
"""

from __future__ import annotations

import math
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from compress.core.artifact import check_model_folder, write_model_artifact
from compress.core.assets import resolve_model
from compress.config import PretrainConfig
from compress.tasks.tables import map_fingerprint
from compress.stages.long_texts import window_texts
from compress.core.errors import CompressError
from compress.stages.training import (checkpoint_dir, guarded_trainer, interrupt_callback, is_main_process, resume_point,
                               run_trainer, training_arguments)
from compress.core.device import device_name, resolve_precision, training_device
from compress.runtime.modeling import autocast, load_tokenizer
from compress.core.quiet import quiet_transformers
from compress.tasks import get_task
from compress.stages.transfer import filter_unlabeled, held_out_overlap, load_unlabeled, mlm_head_keys, split_texts, text_key


class WholeWordMaskCollator:
    """Pads a batch and masks whole words, 80% mask token / 10% random token / 10% unchanged.

    Each feature carries ``input_ids`` and ``word_ids`` (-1 for special tokens). ``generator``
    makes the masks reproducible for a given seed; every call draws new ones.
    """

    def __init__(self, tokenizer, mlm_probability: float = 0.15, whole_word: bool = True, seed: int = 0):
        import torch

        if tokenizer.mask_token_id is None:
            raise CompressError("this tokenizer has no mask token, so it cannot be trained as a masked LM")
        self.mask_id = int(tokenizer.mask_token_id)
        self.pad_id = int(tokenizer.pad_token_id or 0)
        self.p = float(mlm_probability)
        self.whole_word = whole_word
        special = set(tokenizer.all_special_ids)
        self.random_pool = torch.tensor([i for i in range(len(tokenizer)) if i not in special], dtype=torch.long)
        self.generator = torch.Generator().manual_seed(int(seed))

    def __call__(self, features: list[dict[str, Any]]) -> dict[str, Any]:
        import torch

        width = max(len(f["input_ids"]) for f in features)
        n = len(features)
        ids = torch.full((n, width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((n, width), dtype=torch.long)
        words = torch.full((n, width), -1, dtype=torch.long)
        for row, f in enumerate(features):
            length = len(f["input_ids"])
            ids[row, :length] = torch.as_tensor(f["input_ids"])
            mask[row, :length] = 1
            words[row, :length] = torch.as_tensor(f["word_ids"])
        if not self.whole_word:  # every real token its own "word"
            words = torch.where(words >= 0, torch.arange(width).expand(n, width), words)
        chosen = torch.zeros((n, width), dtype=torch.bool)
        for row in range(n):
            present = torch.unique(words[row][words[row] >= 0])
            if not len(present):
                continue
            k = max(1, int(round(self.p * len(present))))
            pick = present[torch.randperm(len(present), generator=self.generator)[:k]]
            chosen[row] = torch.isin(words[row], pick)
        labels = torch.where(chosen, ids, torch.full_like(ids, -100))
        roll = torch.rand((n, width), generator=self.generator)
        inputs = ids.clone()
        inputs[chosen & (roll < 0.8)] = self.mask_id
        swap = chosen & (roll >= 0.8) & (roll < 0.9)
        if swap.any():
            draw = torch.randint(len(self.random_pool), (int(swap.sum()),), generator=self.generator)
            inputs[swap] = self.random_pool[draw]
        return {"input_ids": inputs, "attention_mask": mask, "labels": labels}


def _corpus(cfg: PretrainConfig) -> tuple[list[str], dict[str, Any]]:
    """The corpus texts (task validation/test texts removed, task training texts added) and their stats."""

    corpus = load_unlabeled(cfg.unlabeled, cfg.unlabeled_text_column, balance_column=cfg.unlabeled_balance)
    held_out: list[str] = []  # the task's validation and test texts, kept out of the corpus
    task_texts: list[str] = []
    if cfg.data is not None:
        task = get_task(cfg.data.task()).aspect("training").pretrain_data(cfg.data)
        held_out = split_texts(task, ("validation", "test"))
        if cfg.task_text:
            task_texts = split_texts(task, ("train",))
    overlap = held_out_overlap(cfg.unlabeled, held_out) if cfg.data is not None else None
    texts, _, stats = filter_unlabeled(corpus, {text_key(t) for t in held_out}, {text_key(t) for t in task_texts},
                                       cfg.corpus_limit, cfg.train.seed, overlap)
    texts = texts + task_texts
    stats = {"source": cfg.unlabeled, **stats, "task_train_texts": len(task_texts), "total": len(texts)}
    if len(texts) < 10:
        raise CompressError(f"--unlabeled {cfg.unlabeled}: only {len(texts)} text(s) left to train on; a masked LM "
                            "needs a corpus of at least a few thousand sentences to learn anything useful.")
    return texts, stats


def _tokenize(texts: list[str], tokenizer, max_length: int, stride: int | None = None):
    """The corpus as masked-LM rows: a text past ``max_length`` becomes one row per window, neighbours sharing
    ``stride`` tokens (compress.stages.long_texts), so no line of the corpus is cut."""
    from datasets import Dataset

    def encode(batch):
        enc = tokenizer(batch["text"], truncation=True, max_length=max_length)
        word_ids = [[-1 if w is None else w for w in enc.word_ids(i)] for i in range(len(batch["text"]))]
        return {"input_ids": enc["input_ids"], "word_ids": word_ids, "length": [len(x) for x in enc["input_ids"]]}

    if not getattr(tokenizer, "is_fast", False):
        raise CompressError("pretrain needs a fast tokenizer (tokenizer.json) to find word boundaries")
    ds = window_texts(Dataset.from_dict({"text": texts}), tokenizer, max_length, False, stride,
                      what="masked LM (corpus)").rows
    return ds.map(encode, batched=True, remove_columns=["text"], desc="tokenizing (corpus)", load_from_cache_file=False,
                  new_fingerprint=map_fingerprint(ds, tokenizer, "pretrain corpus", max_length=max_length))


def masked_lm_loss(model, dataset, collator: WholeWordMaskCollator, batch_size: int = 64,
                   precision: str = "fp32") -> float:
    """Mean masked-LM loss per masked token over ``dataset``, with the collator's (seeded) masks."""
    import torch

    model.eval()
    total, count = 0.0, 0
    device = next(model.parameters()).device
    with torch.inference_mode(), autocast(precision, device):
        for start in range(0, len(dataset), batch_size):
            batch = collator([dataset[i] for i in range(start, min(start + batch_size, len(dataset)))])
            batch = {k: v.to(device) for k, v in batch.items()}
            logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits.float()
            labels = batch["labels"]
            picked = labels != -100
            total += float(torch.nn.functional.cross_entropy(logits[picked], labels[picked], reduction="sum"))
            count += int(picked.sum())
    return total / max(count, 1)


def _eval_loss(model, eval_ds, cfg: PretrainConfig, tokenizer, precision: str) -> float:
    # The same masks before and after training: a fresh collator with a fixed seed each time.
    collator = WholeWordMaskCollator(tokenizer, cfg.mlm_probability, cfg.whole_word, seed=10_007 + cfg.train.seed)
    return masked_lm_loss(model, eval_ds, collator, precision=precision)


def pretrain(cfg: PretrainConfig, out: str | os.PathLike) -> Path:
    """Continue masked-LM training of an encoder on unlabelled text; write the masked LM as an artifact."""
    from transformers import AutoModelForMaskedLM

    cfg.validate()
    device = training_device(cfg.device)
    precision = resolve_precision(cfg.precision, device)
    started = time.perf_counter()
    source = resolve_model(cfg.model)
    raw = check_model_folder(source, allow_pickle=cfg.allow_pickle)
    had_head, head_note = mlm_head_keys(source)
    use_safe = any((source / n).exists() for n in ("model.safetensors", "model.safetensors.index.json"))
    try:
        with quiet_transformers():
            model = AutoModelForMaskedLM.from_pretrained(str(source), use_safetensors=use_safe, trust_remote_code=False)
    except ValueError as exc:
        raise CompressError(f"{source}: model_type {raw.get('model_type')!r} has no masked-LM class in transformers "
                            f"({exc}); pretrain needs an encoder with one.") from exc
    tokenizer = load_tokenizer(source, model.config.vocab_size)
    model.to(device)  # the held-out loss before training runs where training does
    if not had_head:
        print(f"note: {source} carries no masked-LM head ({head_note}); a new one is trained from scratch",
              file=sys.stderr)

    texts, stats = _corpus(cfg)
    rng = np.random.default_rng(cfg.train.seed)
    order = rng.permutation(len(texts))
    n_eval = min(2000, max(1, int(round(cfg.eval_share * len(texts)))))
    eval_ds = _tokenize([texts[i] for i in order[:n_eval]], tokenizer, cfg.max_length, cfg.stride)
    train_ds = _tokenize([texts[i] for i in order[n_eval:]], tokenizer, cfg.max_length, cfg.stride)
    stats.update(train_texts=len(texts) - n_eval, eval_texts=n_eval, train_rows=len(train_ds), eval_rows=len(eval_ds))

    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    before = _eval_loss(model, eval_ds, cfg, tokenizer, precision.precision)
    timings["evaluate_before_s"] = round(time.perf_counter() - t0, 1)
    print(f"held-out masked-LM loss before: {before:.4f} (perplexity {math.exp(min(before, 50)):.1f})")

    args = training_arguments(cfg.train, checkpoint_dir(out), len(train_ds), device=device,
                              precision=precision.precision)
    resume = resume_point(out, cfg.resume)
    stop = interrupt_callback()
    collator = WholeWordMaskCollator(tokenizer, cfg.mlm_probability, cfg.whole_word, seed=cfg.train.seed)
    trainer = guarded_trainer(out, model=model, args=args, train_dataset=train_ds, data_collator=collator, callbacks=[stop])
    t0 = time.perf_counter()
    result = run_trainer(trainer, resume, Path(out), stop)
    timings["train_s"] = round(time.perf_counter() - t0, 1)

    t0 = time.perf_counter()
    after = _eval_loss(model, eval_ds, cfg, tokenizer, precision.precision)
    timings["evaluate_after_s"] = round(time.perf_counter() - t0, 1)
    timings["total_s"] = round(time.perf_counter() - started, 1)
    print(f"held-out masked-LM loss after: {after:.4f} (perplexity {math.exp(min(after, 50)):.1f})")

    meta = {
        "stage": "pretrain",
        "kind": "pytorch-mlm",
        "model_type": model.config.model_type,
        "parameters": int(sum(p.numel() for p in model.parameters())),
        "parent": {"model": cfg.model, "path": str(source), "had_mlm_head": had_head},
        "config": cfg.to_dict(),
        "device": device_name(device),
        "precision": precision.to_dict(),
        "corpus": stats,
        "metrics": {"eval_mlm_loss_before": round(before, 5), "eval_mlm_loss_after": round(after, 5),
                    "eval_perplexity_before": round(math.exp(min(before, 50)), 3),
                    "eval_perplexity_after": round(math.exp(min(after, 50)), 3)},
        "training": {"global_steps": result.global_step, "train_loss": round(float(result.training_loss), 5),
                     "effective_batch_size": cfg.train.batch_size * cfg.train.grad_accum * args.world_size},
        "timings": timings,
    }
    if not is_main_process():
        return Path(out)

    path = write_model_artifact(out, model, tokenizer, meta)
    import shutil

    shutil.rmtree(checkpoint_dir(out), ignore_errors=True)
    print(f"pretrain: masked-LM loss {before:.4f} -> {after:.4f} on {len(eval_ds)} held-out texts "
          f"({timings['total_s']:.0f} s)")
    return path
