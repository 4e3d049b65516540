"""Is a classification head trained, or does it only guess? A test on validation accuracy (for a
tagger, on whether it finds any validation entity: :class:`TaggerCheck`).

A model saved as ``...ForSequenceClassification`` straight after conversion, or any base model
loaded into a classification class, carries a randomly initialised head. It looks like a
classifier for the task (right number of labels, an ``architectures`` entry that says so) and
scores about chance: 52% on a balanced two-class task was once packaged as a teacher without a
word. This module decides, from the head's predictions on the validation split, whether it does
better than a classifier that ignores its input.

The test. A classifier that ignores its input is right on at most the share ``p0`` of the
majority class of the validation labels (or ``1/K`` for ``K`` classes, whichever is larger) on
average; the number it gets right on ``n`` examples is then at most Binomial(``n``, ``p0``). The
null hypothesis "this head is no better than that" is tested one-sided and exactly:
``p = P(X >= correct)`` for ``X ~ Binomial(n, p0)``. When ``p > ALPHA`` the head is not shown to
be better than chance and is called untrained. ``ALPHA = 0.01`` bounds the probability that a
head which only guesses passes as trained at 1%; a trained head clears it easily (90% right on
1,056 balanced examples gives p far below 1e-100; 52% gives p = 0.10). The comparison is against
the majority class, not merely ``1/K``, so on an imbalanced task a head that always answers the
common class is not taken for a teacher either.

When ``n`` is so small that even a perfect score could not reach ``ALPHA`` (``p0 ** n > ALPHA``:
fewer than 7 examples at ``p0 = 0.5``) the test cannot decide; the verdict is ``inconclusive``
and nothing is refused on its account.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Self

import numpy as np
from compress.core.errors import CompressError

#: Largest one-sided p-value at which a head still counts as better than chance (see above).
ALPHA = 0.01


def binomial_upper_tail(k: int, n: int, p: float) -> float:
    """``P(X >= k)`` for ``X ~ Binomial(n, p)``, exactly (summed in log space, no overflow)."""
    if k <= 0:
        return 1.0
    if k > n:
        return 0.0
    if p <= 0.0:
        return 0.0
    if p >= 1.0:
        return 1.0
    log_p, log_q = math.log(p), math.log1p(-p)
    terms = [math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1) + i * log_p + (n - i) * log_q
             for i in range(k, n + 1)]
    top = max(terms)
    return float(min(1.0, math.exp(top) * sum(math.exp(t - top) for t in terms)))


class _Verdict:
    """What :class:`HeadCheck` and :class:`TaggerCheck` share: a ``verdict`` field, read back from ``compress.json``."""

    verdict: str

    @property
    def untrained(self) -> bool:
        return self.verdict == "untrained"

    @classmethod
    def from_dict(cls, record: dict[str, Any] | None) -> Self | None:
        """The check a ``compress.json`` recorded, or ``None`` when there is none or it is of another shape."""
        from dataclasses import MISSING, fields

        names = [f.name for f in fields(cls)]
        needed = [f.name for f in fields(cls) if f.default is MISSING]
        if not isinstance(record, dict) or not all(name in record for name in needed):
            return None
        return cls(**{name: record[name] for name in names if name in record})


@dataclass
class HeadCheck(_Verdict):
    """The numbers behind a verdict, as ``compress.json`` records them."""

    accuracy: float
    correct: int
    n: int
    #: Share of the most common validation label, and the class it is.
    majority_rate: float
    majority_label: int
    #: ``max(majority_rate, 1/K)``: the accuracy a head that ignores its input reaches.
    chance_rate: float
    p_value: float
    alpha: float
    #: ``trained`` (better than chance), ``untrained`` (not shown better) or ``inconclusive`` (too few examples).
    verdict: str
    #: What was counted: a classifier's examples, a tagger's words, a reader's answer starts (one per window).
    measure: str = "accuracy"

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        for key in ("accuracy", "majority_rate", "chance_rate"):
            out[key] = round(out[key], 6)
        out["p_value"] = float(f"{self.p_value:.4g}")
        return out

    def summary(self) -> str:
        """One clause for messages: accuracy, the chance level, and the p-value."""
        return (f"validation {self.measure} {self.accuracy:.1%} ({self.correct} of {self.n}) against "
                f"{self.chance_rate:.1%} for always answering the commonest one (one-sided binomial p = {self.p_value:.2g}, "
                f"threshold {self.alpha:g})")


def check_head(logits: np.ndarray, labels: np.ndarray, num_labels: int | None = None,
               alpha: float = ALPHA) -> HeadCheck:
    """Test whether predictions (``argmax`` of ``logits``) beat a classifier that ignores its input."""
    return check_predictions(np.asarray(logits).argmax(-1), labels, num_labels or int(np.asarray(logits).shape[-1]),
                             alpha=alpha)


def check_predictions(pred: np.ndarray, labels: np.ndarray, k: int, alpha: float = ALPHA,
                      measure: str = "accuracy") -> HeadCheck:
    """:func:`check_head` from predicted classes: any head whose output is one of ``k`` classes per unit (a
    tagger's word tags, a reader's answer-start positions) is tested the same way. Units of one sentence are not
    independent, so for a tagger or reader the p-value is a screen for a head that ignores its input, not an
    exact level."""
    labels = np.asarray(labels).astype(int)
    pred = np.asarray(pred).astype(int)
    n = int(len(labels))
    k = max(int(k), int(labels.max()) + 1 if n else 1)
    if n == 0:
        return HeadCheck(0.0, 0, 0, 0.0, -1, 1.0 / max(k, 1), 1.0, alpha, "inconclusive", measure)
    counts = np.bincount(labels, minlength=k)
    majority = int(counts.argmax())
    majority_rate = float(counts[majority] / n)
    chance = max(majority_rate, 1.0 / k)
    correct = int((pred == labels).sum())
    p_value = binomial_upper_tail(correct, n, chance)
    if chance ** n > alpha:  # even n of n right would not be significant
        verdict = "inconclusive"
    else:
        verdict = "trained" if p_value <= alpha else "untrained"
    return HeadCheck(correct / n, correct, n, majority_rate, majority, chance, p_value, alpha, verdict, measure)


def judge_existing_head(check: HeadCheck, finetune: bool | None, model: str) -> str:
    """What the teacher stage does with a head it found: ``kept`` or ``fine-tune``; raises under ``--finetune no``.

    Prints one line whenever the head is not simply kept, so the decision is never silent.
    """

    if check.untrained:
        if finetune is False:
            raise CompressError(
                f"--model {model}: its head was never trained for this task ({check.summary()}), so "
                "it cannot teach. Drop --finetune no (or pass --finetune yes) to fine-tune it, or give a model "
                "fine-tuned on this task."
            )
        print(f"note: --model {model} has a head for this task, but it is no better than chance "
              f"({check.summary()}); fine-tuning it.")
        return "fine-tune"
    if check.verdict == "inconclusive":
        print(f"warning: --model {model}: only {check.n} validation examples, too few to tell a trained head from "
              f"chance ({check.summary()}); keeping the head as it is.")
    elif finetune is None:  # the training flags go unused: say so, and how to train anyway
        print(f"note: --model {model} has a head that is better than chance ({check.summary()}): kept as it is, not "
              "trained (pass --finetune yes to fine-tune it further).")
    return "kept"


@dataclass
class TaggerCheck(_Verdict):
    """A tagger's counterpart of :class:`HeadCheck`: does it find any entity of the validation split?

    A tagger that ignores its input tags every word with the commonest tag, ``O``, and finds no entity:
    entity F1 0 at a token accuracy of ~90%. So a tagger is called ``untrained`` when it finds none of the
    validation split's gold entities; ``inconclusive`` when the split has none. This is the failure seen in
    practice: full fine-tuning of mpnet-base on WNUT-17 at lr 1e-4 once collapsed into tagging every word
    ``O`` (training loss flat at ~0.3 from the first epoch on) and was packaged as a teacher without a word.
    A random head finds a few entities by luck, so this catches a collapse, not every head never trained
    (the teacher stage fine-tunes a model without a head anyway)."""

    entity_f1: float
    correct: int
    gold: int
    predicted: int
    verdict: str

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "entity_f1": round(self.entity_f1, 6)}

    def summary(self) -> str:
        """One clause for messages: what it found against the gold entities."""
        return (f"validation entity F1 {self.entity_f1:.4f}: {self.correct} of {self.gold} entities found, "
                f"{self.predicted} predicted; tagging every word O scores 0")


def check_tagger(scores: dict[str, Any]) -> TaggerCheck:
    """:class:`TaggerCheck` from a tagger's validation scores (``compress.tasks.token_classification.score``)."""
    per_type = scores.get("per_type", {}).values()
    gold = sum(int(t["support"]) for t in per_type)
    predicted = sum(int(t["predicted"]) for t in per_type)
    correct = round(scores["entity_recall"] * gold)
    verdict = "inconclusive" if gold == 0 else "trained" if correct > 0 else "untrained"
    return TaggerCheck(float(scores["entity_f1"]), correct, gold, predicted, verdict)


def refuse_untrained_teacher(check: HeadCheck | TaggerCheck, teacher: str, allowed: bool) -> None:
    """Distillation's guard: a teacher at chance would teach noise; refuse it unless the user insists."""

    if not check.untrained:
        return
    if allowed:
        print(f"warning: the teacher {teacher} is no better than chance ({check.summary()}); distilling from it "
              "anyway.")
        return
    raise CompressError(
        f"--teacher {teacher} is no better than chance on this task ({check.summary()}): its head was never trained "
        f"for it, or its fine-tuning collapsed, and it would teach noise. Fine-tune it first (bert-compress teacher "
        f"--model {teacher} --data DATA --out TEACHER_DIR; a teacher stage that collapsed: train it again with a "
        "lower --lr or another --seed), or pass --allow-untrained-teacher to distil from it anyway."
    )
