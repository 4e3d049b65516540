"""Distillation losses, each a plain function registered by name and by the signal it compares.

A distillation setup is a list of loss terms (:class:`LossTerm`: which registered loss, on which
signal, with which weight), which is what recipes and ``compress.json`` record; the trainer computes
each signal once and hands it to every term that asks for it. Adding a loss is one decorated
function here (or in user code, before ``distill`` runs) and no trainer edit::

    @register("hidden_l1", kind="states")
    def hidden_l1(student_hidden, teacher_hidden, attention_mask): ...

and then ``losses: [{loss: hidden_l1, weight: 1.0}]`` in a recipe.

The kinds, and the signature a loss of each kind has:

- ``soft``: ``fn(student_logits, teacher_logits, temperature)``, a batch mean (the teacher's soft labels).
- ``hard``: ``fn(student_logits, labels)``, a batch mean over the gold labels.
- A ``soft`` loss also applies to ``on: gold``, the data's own label probabilities (``distill --gold-labels``,
  :mod:`compress.stages.gold_labels`): called with their logarithms as the teacher's logits at temperature 1, so
  ``soft_ce`` is the cross-entropy with those probabilities, over the rows that have them.
- ``states``: ``fn(student_hidden, teacher_hidden, attention_mask)``, over real tokens; the student's
  states arrive already projected to the teacher's width. Applied to the embedding output
  (``on: embeddings``) or to every mapped layer pair (``on: hidden``, averaged over pairs).
- ``attention``: ``fn(student_attn, teacher_attn, attention_mask)`` on ``[batch, heads, query, key]``
  maps of every mapped layer pair (averaged over pairs).
- ``vectors``: ``fn(student_vectors, teacher_vectors)`` on one ``[batch, width]`` sentence vector per row
  (``on: pooled``): the mean over real tokens of each model's last hidden states, the student's through a
  learned projection to the teacher's width (:mod:`compress.stages.distill.pooled`). The teacher's vectors are
  cached with its soft labels, so no teacher pass is needed once they are.

The built-in losses:

- ``soft_ce``: cross-entropy between the teacher's and the student's distributions at temperature
  T, scaled by T² so its gradients keep their size as T changes (Hinton et al.).
- ``kl``: the same comparison as a KL divergence (equal to ``soft_ce`` minus the teacher's entropy,
  so the same gradients; its value is 0 when the two agree, which reads better in logs).
- ``logit_mse``: squared error between the student's and the teacher's logits, each row centred
  first (a softmax ignores a shift of all logits). Hinton et al.'s high-temperature limit of
  ``soft_ce``: it keeps how sure the teacher is, which a near-certain teacher's probabilities
  flatten away; the temperature does not apply.
- ``hard_ce``: ordinary cross-entropy with the gold labels.
- ``teacher_ce``: cross-entropy with the teacher's top class (hard pseudo-labels), on every row the teacher
  labelled, transfer rows included (which have no gold label). Where a soft loss keeps the student's
  probability of an uncertain class near the teacher's (a tagger's entity word at 0.6 against ``O``), this
  one rewards reaching the teacher's decision; used beside a soft term (``--losses
  logit_mse:1,teacher_ce:0.5,hard_ce:0.5``), logged as ``teacher``. The temperature does not apply.
- ``hidden_mse``: TinyBERT's hidden-state (and embedding) loss, mean squared error over real
  tokens. Its size follows the teacher's activation scale (MPNet's hidden states have an RMS of
  about 0.3, so the loss starts near 0.1 and its gradients are small beside the logit loss).
- ``hidden_nmse``: the same after standardising each token vector of both sides (layer norm without
  affine parameters): scale-free, about 2 for unrelated states and 0 for a perfect match, so its
  weight means the same for any teacher.
- ``hidden_cosine``: 1 - cosine similarity per real token, averaged.
- ``pooled_cosine``: 1 - cosine similarity of each row's student and teacher sentence vectors, averaged.
- ``pooled_nmse``: squared error of the two sentence vectors after standardising each (as ``hidden_nmse``).
- ``pooled_relation``: the in-batch relational variant: squared error between the two sides' matrices of
  cosine similarities between the batch's rows (off the diagonal), so the student keeps how the teacher
  places sentences relative to one another rather than where (Park et al.'s relational distillation).
- ``attention_mse``: TinyBERT's attention loss: squared error between attention maps, summed over
  the real keys of each query row and averaged over real queries and heads (a per-element mean
  would be ~1/length as large and vanish beside the hidden-state loss); when head counts differ,
  maps are averaged over heads first.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

from compress.core.errors import CompressError

if TYPE_CHECKING:  # torch is imported inside the functions: configs read the registry without loading it
    import torch

#: name -> function. Kept as a plain dict: ``LOSSES["soft_ce"](s, t, 2.0)`` is the public way to call one.
LOSSES: dict[str, Callable[..., torch.Tensor]] = {}
#: name -> kind (``soft``, ``hard``, ``states`` or ``attention``).
KINDS: dict[str, str] = {}

#: The signals a term can compare, and the loss kind each one takes.
SIGNALS = {"logits": "soft", "labels": "hard", "gold": "soft", "embeddings": "states", "hidden": "states",
           "attention": "attention", "pooled": "vectors"}
#: Signals that need the teacher's intermediate outputs (and position-aligned tokenizations).
INTERMEDIATE_SIGNALS = ("embeddings", "hidden", "attention")
_DEFAULT_SIGNAL = {"soft": "logits", "hard": "labels", "states": "hidden", "attention": "attention",
                   "vectors": "pooled"}
#: The log name of a term on each signal (``loss_kd`` etc. in the training log).
_DEFAULT_NAME = {"logits": "kd", "labels": "hard", "gold": "gold", "embeddings": "embedding", "hidden": "hidden",
                 "attention": "attention", "pooled": "pooled"}


#: loss -> its own log name on its kind's usual signal, for a loss meant to sit beside another term on that
#: signal (two terms on the logits cannot both log as ``kd``).
_LOSS_NAME: dict[str, str] = {}


def register(name: str, kind: str, log_name: str | None = None):
    """Register ``fn`` as the loss ``name`` of ``kind`` (see the module docstring for signatures); ``log_name``:
    the name its terms take on the kind's usual signal instead of that signal's (``kd`` for the logits)."""
    if kind not in _DEFAULT_SIGNAL:
        raise ValueError(f"loss kind must be one of {', '.join(_DEFAULT_SIGNAL)}, got {kind!r}")

    def wrap(fn):
        LOSSES[name] = fn
        KINDS[name] = kind
        if log_name is not None:
            _LOSS_NAME[name] = log_name
        return fn
    return wrap


def names(kind: str) -> tuple[str, ...]:
    """The registered losses of one kind, e.g. the choices of ``--kd-loss``."""
    return tuple(n for n, k in KINDS.items() if k == kind)


@dataclass
class LossTerm:
    """One term of the distillation objective: ``weight * loss(student signal, teacher signal)``."""

    loss: str
    weight: float = 1.0
    #: logits, labels, gold, embeddings, hidden, attention or pooled; default: the loss kind's usual signal.
    on: str | None = None
    #: Name in logs and ``compress.json`` (default: kd, hard, embedding, hidden, attention).
    name: str | None = None

    def __post_init__(self) -> None:
        if self.on is None and self.loss in KINDS:
            self.on = _DEFAULT_SIGNAL[KINDS[self.loss]]
        if self.name is None and self.loss in _LOSS_NAME and self.on == _DEFAULT_SIGNAL[KINDS[self.loss]]:
            self.name = _LOSS_NAME[self.loss]
        if self.name is None and self.on in _DEFAULT_NAME:
            self.name = _DEFAULT_NAME[self.on]

    @property
    def intermediate(self) -> bool:
        return self.on in INTERMEDIATE_SIGNALS

    @property
    def pooled(self) -> bool:
        """Whether this term compares sentence vectors (the teacher's are cached with its soft labels)."""
        return self.on == "pooled"

    def problems(self) -> list[str]:
        """What is wrong with this term, as messages (empty when fine)."""
        if self.loss not in LOSSES:
            return [f"loss {self.loss!r} is not registered; known: {', '.join(LOSSES)}"]
        out = []
        if self.on not in SIGNALS:
            out.append(f"loss {self.loss}: on must be one of {', '.join(SIGNALS)}, got {self.on!r}")
        elif SIGNALS[self.on] != KINDS[self.loss]:
            fits = [s for s, k in SIGNALS.items() if k == KINDS[self.loss]]
            out.append(f"loss {self.loss} is a {KINDS[self.loss]} loss and applies to {' or '.join(fits)}, "
                       f"not {self.on}")
        if not isinstance(self.weight, (int, float)) or isinstance(self.weight, bool) or self.weight < 0:
            out.append(f"loss {self.loss}: weight must be a number >= 0, got {self.weight!r}")
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "loss": self.loss, "on": self.on, "weight": self.weight}

    @classmethod
    def from_dict(cls, d: dict[str, Any] | "LossTerm") -> "LossTerm":
        if isinstance(d, LossTerm):
            return d
        if not isinstance(d, dict) or "loss" not in d:
            raise CompressError(f"a loss term is a mapping with at least 'loss' (and weight, on, name), got {d!r}")
        unknown = set(d) - {"loss", "weight", "on", "name"}
        if unknown:
            raise CompressError(f"loss term {d!r}: unknown key(s) {', '.join(sorted(unknown))}; "
                                "a term takes loss, weight, on, name")
        return cls(loss=str(d["loss"]), weight=d.get("weight", 1.0), on=d.get("on"), name=d.get("name"))


def check_terms(terms: list[LossTerm]) -> list[str]:
    """Problems with a whole list of terms: each term's own, duplicate names, nothing to learn from."""
    problems = [p for t in terms for p in t.problems()]
    seen: set[str] = set()
    for t in terms:
        if t.name in seen:
            problems.append(f"two loss terms are named {t.name!r}; give one a different name")
        seen.add(str(t.name))
    if terms and not any(t.weight > 0 for t in terms):
        problems.append("every loss weight is 0: set --alpha-kd or --alpha-hard above 0")
    if not terms:
        problems.append("the loss list is empty: give at least one term, e.g. {loss: soft_ce, weight: 1.0}")
    return problems


def row_weighted(loss: Callable[..., "torch.Tensor"], sample_weight: "torch.Tensor | None", student: "torch.Tensor",
                 target: "torch.Tensor", *args: Any) -> "torch.Tensor":
    """``sum_i w_i * loss_i / n`` for a batch-mean ``loss`` over ``n`` rows, exactly, without per-row loss
    functions (a row is a text for a classifier, a word for a tagger).

    Rows are grouped by weight (labelled and augmented rows weigh 1, unlabelled rows
    ``--unlabeled-weight``), and each group's mean is scaled by ``weight * rows / n``: a transfer row at
    weight w pulls w times as hard as a labelled one, and a labelled one as hard as without transfer rows.
    Without weights, or with every weight 1, this is the plain batch mean.
    """
    import torch

    if sample_weight is None:
        return loss(student, target, *args)
    total = student.sum() * 0.0
    n = len(sample_weight)
    for value in torch.unique(sample_weight):
        rows = sample_weight == value
        if float(value) != 0.0:
            total = total + value * (rows.sum() / n) * loss(student[rows], target[rows], *args)
    return total


@register("soft_ce", kind="soft")
def soft_cross_entropy(student_logits: torch.Tensor, teacher_logits: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """-sum p_T * log q_S at temperature T, times T², averaged over the batch."""
    import torch.nn.functional as F

    t = float(temperature)
    target = F.softmax(teacher_logits.float() / t, dim=-1)
    log_q = F.log_softmax(student_logits.float() / t, dim=-1)
    return -(target * log_q).sum(-1).mean() * (t * t)


@register("kl", kind="soft")
def kl_divergence(student_logits: torch.Tensor, teacher_logits: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """KL(p_T || q_S) at temperature T, times T², averaged over the batch."""
    import torch.nn.functional as F

    t = float(temperature)
    log_p = F.log_softmax(teacher_logits.float() / t, dim=-1)
    log_q = F.log_softmax(student_logits.float() / t, dim=-1)
    return (log_p.exp() * (log_p - log_q)).sum(-1).mean() * (t * t)


@register("logit_mse", kind="soft")
def logit_mse(student_logits: torch.Tensor, teacher_logits: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """Mean squared error between the row-centred logits, averaged over classes and the batch.

    ``temperature`` is accepted for the soft-loss signature and ignored: this is the limit that
    ``soft_ce`` approaches as T grows (its gradient tends to (z_s - z_t) / N for centred logits).
    """
    s, t = student_logits.float(), teacher_logits.float()
    s = s - s.mean(-1, keepdim=True)
    t = t - t.mean(-1, keepdim=True)
    return ((s - t) ** 2).mean()


@register("teacher_ce", kind="soft", log_name="teacher")
def teacher_cross_entropy(student_logits: torch.Tensor, teacher_logits: torch.Tensor,
                          temperature: float = 1.0) -> torch.Tensor:
    """Cross-entropy of the student's logits with the teacher's top class per row, averaged over the batch.

    ``temperature`` is accepted for the soft-loss signature and ignored: the target is a class, not a
    distribution. Ties go to the lower class index (``argmax``)."""
    import torch.nn.functional as F

    return F.cross_entropy(student_logits.float(), teacher_logits.argmax(-1))


@register("hard_ce", kind="hard")
def hard_cross_entropy(student_logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    import torch.nn.functional as F

    return F.cross_entropy(student_logits.float(), labels)


def _token_mask(mask: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    return mask.to(like.dtype).unsqueeze(-1)


@register("hidden_mse", kind="states")
def hidden_mse(student_hidden: torch.Tensor, teacher_hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """Mean squared error per hidden unit over the real tokens (padding excluded).

    ``student_hidden`` must already be projected to the teacher's width.
    """
    s, t = student_hidden.float(), teacher_hidden.float()
    mask = _token_mask(attention_mask, s)
    sq = ((s - t) ** 2) * mask
    return sq.sum() / (mask.sum() * s.shape[-1]).clamp_min(1.0)


@register("hidden_nmse", kind="states")
def hidden_nmse(student_hidden: torch.Tensor, teacher_hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """:func:`hidden_mse` of the two sides after standardising each token vector (zero mean, unit
    variance over the hidden units): scale-free, so the weight means the same for every teacher."""
    import torch.nn.functional as F

    s = F.layer_norm(student_hidden.float(), student_hidden.shape[-1:])
    t = F.layer_norm(teacher_hidden.float(), teacher_hidden.shape[-1:])
    return hidden_mse(s, t, attention_mask)


@register("hidden_cosine", kind="states")
def hidden_cosine(student_hidden: torch.Tensor, teacher_hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """1 - cosine similarity of each real token's student and teacher vectors, averaged over tokens."""
    import torch.nn.functional as F

    cos = F.cosine_similarity(student_hidden.float(), teacher_hidden.float(), dim=-1)
    m = attention_mask.to(cos.dtype)
    return ((1.0 - cos) * m).sum() / m.sum().clamp_min(1.0)


@register("attention_mse", kind="attention")
def attention_mse(student_attn: torch.Tensor, teacher_attn: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """Squared error of attention maps ``[batch, heads, query, key]``: summed over real keys, averaged
    over real query rows and heads."""
    s, t = student_attn.float(), teacher_attn.float()
    if s.shape[1] != t.shape[1]:
        s, t = s.mean(1, keepdim=True), t.mean(1, keepdim=True)
    m = attention_mask.to(s.dtype)
    pair = (m[:, :, None] * m[:, None, :]).unsqueeze(1)  # [batch, 1, query, key]
    sq = ((s - t) ** 2) * pair
    return sq.sum() / (m.sum() * s.shape[1]).clamp_min(1.0)


def _standardised(vectors: torch.Tensor) -> torch.Tensor:
    import torch.nn.functional as F

    return F.layer_norm(vectors.float(), vectors.shape[-1:])


@register("pooled_cosine", kind="vectors")
def pooled_cosine(student_vectors: torch.Tensor, teacher_vectors: torch.Tensor) -> torch.Tensor:
    """1 - cosine similarity of each row's two sentence vectors, averaged over the batch."""
    import torch.nn.functional as F

    return (1.0 - F.cosine_similarity(student_vectors.float(), teacher_vectors.float(), dim=-1)).mean()


@register("pooled_nmse", kind="vectors")
def pooled_nmse(student_vectors: torch.Tensor, teacher_vectors: torch.Tensor) -> torch.Tensor:
    """Mean squared error per unit of the two sentence vectors, each standardised first (scale-free: about 2
    for unrelated vectors, 0 for a match)."""
    return ((_standardised(student_vectors) - _standardised(teacher_vectors)) ** 2).mean()


@register("pooled_relation", kind="vectors")
def pooled_relation(student_vectors: torch.Tensor, teacher_vectors: torch.Tensor) -> torch.Tensor:
    """Squared error between the batch's cosine-similarity matrices of the two sides, over the pairs of distinct
    rows (0 for a batch of one row: there is no relation to keep)."""
    import torch
    import torch.nn.functional as F

    n = student_vectors.shape[0]
    if n < 2:
        return student_vectors.sum() * 0.0
    s = F.normalize(student_vectors.float(), dim=-1)
    t = F.normalize(teacher_vectors.float(), dim=-1)
    off = ~torch.eye(n, dtype=torch.bool, device=s.device)
    return ((s @ s.T - t @ t.T)[off] ** 2).mean()
