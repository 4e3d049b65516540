"""The transfer set: augmented variants and unlabelled text, tokenized for both models and soft-labelled."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from typing import Any

from compress.config import transfer_problems
from compress.tasks.tables import BUILTIN_UNLABELED
from compress.core.errors import CompressError
from compress.stages.transfer.augment import MASK, OPS, AugmentOptions, augmented_rows, parse_ops
from compress.stages.transfer.candidates import candidate_source
from compress.corpora.corpus import BUILTIN_CORPUS_STATS, filter_unlabeled, held_out_overlap, load_unlabeled
from compress.corpora.texts import joined_texts, split_keys, split_texts
from compress.tasks.tables import map_fingerprint, tokenize_split
from compress.stages.long_texts import window_texts
from compress.stages.teacher import teacher_logits

@dataclass
class TransferOptions:
    """The distill stage's transfer-data settings (``--unlabeled*`` and ``--augment*`` flags)."""

    unlabeled: str | None = None
    unlabeled_text_column: str = "text"
    unlabeled_text_pair_column: str | None = None
    unlabeled_weight: float = 1.0
    unlabeled_limit: int | None = None
    #: The corpus column the ``unlabeled_limit`` sample is drawn evenly across (``--unlabeled-balance``).
    unlabeled_balance: str | None = None
    #: ``random`` (a seeded sample) or ``similar`` (the texts most like the labelled ones): ``--unlabeled-select``.
    unlabeled_select: str = "random"
    augment: int = 0
    augment_ops: str = ",".join(OPS)
    seed: int = 0
    max_length: int = 128
    #: ``--stride``: the overlap of a long text's windows (None: the default of ``max_length``).
    stride: int | None = None
    #: The decided precision (fp32, bf16 or fp16) the teacher labels and proposes words in.
    precision: str = "fp32"

    @classmethod
    def from_config(cls, cfg: Any, precision: str = "fp32") -> "TransferOptions":
        """From a ``DistillConfig`` (read by attribute, so this module does not import the trainer) and the
        precision the stage decided for its ``--precision``."""
        return cls(unlabeled=cfg.unlabeled, unlabeled_text_column=cfg.unlabeled_text_column,
                   unlabeled_text_pair_column=cfg.unlabeled_text_pair_column, unlabeled_weight=cfg.unlabeled_weight,
                   unlabeled_limit=getattr(cfg, "unlabeled_limit", None),
                   unlabeled_balance=getattr(cfg, "unlabeled_balance", None),
                   unlabeled_select=getattr(cfg, "unlabeled_select", "random"), augment=cfg.augment,
                   augment_ops=cfg.augment_ops, seed=cfg.train.seed, max_length=cfg.max_length,
                   stride=getattr(cfg, "stride", None), precision=precision)

    @property
    def active(self) -> bool:
        return bool(self.augment) or bool(self.unlabeled)

    def validate(self) -> list[str]:
        """Problems with these settings, as messages naming the flag (empty when fine)."""
        return [p.message for p in transfer_problems(self.augment, self.augment_ops, self.unlabeled,
                                                     self.unlabeled_weight, self.unlabeled_limit,
                                                     self.unlabeled_text_pair_column)]


def with_mask_token(ds, tokenizer, is_pair: bool):
    """Write the tokenizer's own mask token where augmentation masked a word (``<mask>`` for MPNet)."""
    token = tokenizer.mask_token or tokenizer.unk_token or ""
    if token == MASK:
        return ds

    def swap(batch):
        out = {"text": [t.replace(MASK, token) for t in batch["text"]]}
        if is_pair:
            out["text_pair"] = [t.replace(MASK, token) for t in batch["text_pair"]]
        return out

    return ds.map(swap, batched=True, load_from_cache_file=False, desc="mask tokens",
                  new_fingerprint=map_fingerprint(ds, None, "mask tokens", token=token, is_pair=is_pair))


def tokenize_for_distillation(ds, student_tokenizer, teacher_tokenizer, max_length: int, is_pair: bool,
                              stride: int | None = None):
    """Tokenize rows for the student (``s_*`` + ``length``) and the teacher (``t_*``), as distill does; a text past
    ``max_length`` becomes one row per student window (overlapping by ``stride``), both models reading its words
    (compress.stages.long_texts)."""

    ds = window_texts(ds, student_tokenizer, max_length, is_pair, stride, what="student (transfer rows)").rows
    out = tokenize_split(with_mask_token(ds, student_tokenizer, is_pair), student_tokenizer, max_length, is_pair,
                         prefix="s_", with_length=True, what="student")
    t_ds = tokenize_split(with_mask_token(ds, teacher_tokenizer, is_pair), teacher_tokenizer, max_length, is_pair,
                          prefix="t_", what="teacher")
    for col in t_ds.column_names:
        if col.startswith("t_"):
            out = out.add_column(col, t_ds[col][:])
    return out


@dataclass
class TransferSet:
    """Teacher-labelled rows to train on beside the labelled set, and what they are made of."""

    parts: dict[str, Any]  # name -> tokenized dataset with soft_labels, label (-100), sample_weight
    info: dict[str, Any]

    def __len__(self) -> int:
        return sum(len(p) for p in self.parts.values())

    def rows(self, column: str) -> list:
        """One column over every part (e.g. ``t_input_ids`` for the alignment check)."""
        return [value for part in self.parts.values() for value in part[column][:]]

    def extend(self, train_ds, fill: dict[str, Any] | None = None):
        """The labelled training rows (weight 1) followed by every transfer row, same columns; ``fill`` gives the
        value transfer rows take in a labelled-only column (``{"gold": [-1.0, -1.0]}``: no gold probabilities)."""
        from datasets import concatenate_datasets

        base = train_ds.add_column("sample_weight", [1.0] * len(train_ds))
        cols = base.column_names
        extra = dict(fill or {})
        parts = [base] + [_filled(p, extra).select_columns(cols).cast(base.features) for p in self.parts.values()
                          if len(p)]
        return concatenate_datasets(parts)

    def describe(self) -> dict[str, Any]:
        """What ``compress.json`` records under ``"transfer"``."""
        return self.info


def _filled(part, fill: dict[str, Any]):
    """``part`` with each column of ``fill`` it lacks, every row holding the given value."""
    for name, value in fill.items():
        if name not in part.column_names:
            part = part.add_column(name, [value] * len(part))
    return part


def build_transfer(options: TransferOptions, task, teacher, student_tokenizer, label: bool = True) -> TransferSet | None:
    """Augment and/or read the unlabelled corpus, tokenize it for both models and (``label``) soft-label it.

    Returns ``None`` when neither ``--augment`` nor ``--unlabeled`` is set, so a labelled-only
    run is exactly what it was before. With ``label=False`` the rows carry no ``soft_labels``
    column: the distillation trainer fills them while it trains (``compress.stages.distill.soft_labels``).
    """
    from datasets import Dataset

    if not options.active:
        return None
    for problem in options.validate():
        raise CompressError(problem)
    started = time.perf_counter()
    held_out = split_keys(task, ("validation", "test"))
    labelled = split_keys(task, ("train",))
    n_train = len(task.splits["train"])
    info: dict[str, Any] = {"labelled": n_train, "augmented": 0, "unlabeled": 0,
                            "sources": {"labelled": task.source},
                            "weights": {"labelled": 1.0}}
    raw: dict[str, Any] = {}

    if options.augment:
        ops = parse_ops(options.augment_ops)
        opts = AugmentOptions(n=options.augment, ops=ops, seed=options.seed)
        source, why = candidate_source(teacher, opts.mlm_groups)
        train = task.splits["train"]
        t0 = time.perf_counter()
        rows, reused, path = augmented_rows(train["text"][:], train["text_pair"][:] if task.is_pair else None, opts,
                                            source, held_out, options.precision)
        by_op = {op: sum(1 for r in rows if r["op"] == op) for op in ops}
        info["augment"] = {"per_example": options.augment, "ops": list(ops), "made": len(rows), "by_op": by_op,
                           "replace_candidates": why if "replace" in ops else None, "top_k": opts.top_k,
                           "p_replace": opts.p_replace, "p_mask": opts.p_mask, "p_delete": opts.p_delete,
                           "p_swap": opts.p_swap, "seed": opts.seed, "cache": str(path), "reused": reused,
                           "seconds": round(time.perf_counter() - t0, 1)}
        info["sources"]["augmented"] = f"{options.augment} variant(s) per labelled example ({','.join(ops)})"
        info["weights"]["augmented"] = 1.0
        short = n_train * options.augment - len(rows)
        if short:
            print(f"note: augmentation made {len(rows)} of {n_train * options.augment} variants; the rest were "
                  "duplicates, equal to a labelled/validation/test text, or too short to edit", file=sys.stderr)
        columns = {"text": [r["text"] for r in rows]}
        if task.is_pair:
            columns["text_pair"] = [r["text_pair"] for r in rows]
        raw["augmented"] = (Dataset.from_dict(columns), 1.0)

    if options.unlabeled:
        corpus = load_unlabeled(options.unlabeled, options.unlabeled_text_column, options.unlabeled_text_pair_column,
                                task.is_pair, options.unlabeled_balance)
        texts, pairs, stats = filter_unlabeled(corpus, held_out, labelled, options.unlabeled_limit, options.seed,
                                               held_out_overlap(options.unlabeled,
                                                                split_texts(task, ("validation", "test"))),
                                               similar_to=joined_texts(task, "train")
                                               if options.unlabeled_select == "similar" else None)
        if options.unlabeled in BUILTIN_UNLABELED:
            stats["built_in"] = BUILTIN_CORPUS_STATS[options.unlabeled]()
        info["unlabeled_corpus"] = {"source": options.unlabeled, **stats}
        info["sources"]["unlabeled"] = options.unlabeled
        info["weights"]["unlabeled"] = options.unlabeled_weight
        if not texts:
            print(f"note: --unlabeled {options.unlabeled}: no text left after removing duplicates and texts that "
                  "are in the task's splits", file=sys.stderr)
        columns = {"text": texts}
        if pairs is not None:
            columns["text_pair"] = pairs
        raw["unlabeled"] = (Dataset.from_dict(columns), options.unlabeled_weight)

    parts: dict[str, Any] = {}
    reused_labels: dict[str, bool] = {}
    labelling = 0.0
    for name, (ds, weight) in raw.items():
        info[name] = len(ds)
        if not len(ds):
            continue
        tokenized = tokenize_for_distillation(ds, student_tokenizer, teacher.tokenizer, options.max_length,
                                              task.is_pair, options.stride)
        n = len(tokenized)
        if n != len(ds):  # texts past --max-length, one row per window
            info.setdefault("rows", {})[name] = n
        if label:
            t0 = time.perf_counter()
            logits, reused_labels[name] = teacher_logits(teacher, tokenized, prefix="t_", precision=options.precision,
                                                         what=name)
            labelling += time.perf_counter() - t0
            tokenized = tokenized.add_column("soft_labels", [row.tolist() for row in logits])
        tokenized = tokenized.add_column("label", [-100] * n)
        parts[name] = tokenized.add_column("sample_weight", [float(weight)] * n)
    info["total"] = n_train + info["augmented"] + info["unlabeled"]
    if label:
        info["teacher_labelling_s"] = round(labelling, 1)
        info["soft_labels_reused"] = reused_labels
    info["seconds"] = round(time.perf_counter() - started, 1)
    return TransferSet(parts, info)
