"""Replacement candidates for augmentation: a masked-LM head when one exists, else embedding neighbours."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from compress.core.errors import CompressError
from compress.stages.transfer.segment import Segmented, whole_words
from compress.core.artifact import weights_sha256
from compress.runtime.modeling import autocast, load_tokenizer
from compress.core.progress import bars_enabled
from compress.core.quiet import quiet_transformers

def mlm_head_keys(folder: Path) -> tuple[bool, str]:
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

    def propose(self, segments: Sequence[Segmented], top_k: int, batch_size: int = 32,
                precision: str = "fp32") -> list[list[list[int]]]:
        import torch

        whole, _ = whole_words(self.tokenizer)
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
        self.folder = Path(folder)
        self.groups = max(1, groups)
        self.tokenizer = load_tokenizer(self.folder)
        self.identity = f"mlm:{weights_sha256(self.folder)}:groups={self.groups}"
        self.where = str(self.folder)
        self._model = None

    def _load(self):
        if self._model is None:
            from transformers import AutoModelForMaskedLM

            with quiet_transformers():
                self._model = AutoModelForMaskedLM.from_pretrained(str(self.folder), use_safetensors=True,
                                                                   trust_remote_code=False)
            self._model.eval()
        return self._model

    def propose(self, segments: Sequence[Segmented], top_k: int, batch_size: int = 32,
                precision: str = "fp32") -> list[list[list[int]]]:
        import torch
        from tqdm.auto import tqdm

        whole, _ = whole_words(self.tokenizer)
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
            with torch.inference_mode(), autocast(precision):
                for start in tqdm(range(0, len(order), batch_size), desc="masked-LM candidates", unit="batch",
                                  file=sys.stderr, leave=False, disable=not bars_enabled()):
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
        ok, why = mlm_head_keys(path)
        if ok:
            return MaskedLMCandidates(path, mlm_groups), f"masked-LM head of {path}"
        reasons.append(f"{label} {path}: {why}")
    source = EmbeddingNeighbours(teacher.model, teacher.tokenizer, teacher.weights_sha256, str(teacher.path))
    return source, "nearest neighbours in the teacher's input embeddings (" + "; ".join(reasons) + ")"
