"""Named student shapes and the ``LxH`` shorthand.

A shape fixes depth, width, heads and FFN size; vocabulary, position limit and the architecture
family come from the teacher (or from the pretrained model a student is initialised from).
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass

from compress.core.errors import CompressError


@dataclass(frozen=True)
class StudentShape:
    """Depth and width of a student encoder."""

    layers: int
    hidden: int
    heads: int
    ffn: int
    name: str = ""

    def to_dict(self) -> dict:
        return asdict(self)


PRESETS: dict[str, StudentShape] = {
    # TinyBERT-6L / MiniLM-L6-H384: the default, and the shape of the built-in MiniLM checkpoint.
    "tinybert-6l-384": StudentShape(6, 384, 12, 1536, "tinybert-6l-384"),
    # TinyBERT-4L-312 (General_TinyBERT_4L_312D): 12 heads of 26 dimensions, FFN 1200.
    "tinybert-4l-312": StudentShape(4, 312, 12, 1200, "tinybert-4l-312"),
    # DistilBERT's shape: half the layers of BERT-base at full width.
    "distil-6l-768": StudentShape(6, 768, 12, 3072, "distil-6l-768"),
}
DEFAULT_PRESET = "tinybert-6l-384"


def default_heads(hidden: int) -> int:
    """12 heads when the width divides by 12 into heads of 16+ dims (as BERT, MiniLM, TinyBERT do);
    otherwise the largest head count up to 12 with 64-, 32- or at least 16-dimensional heads."""
    if hidden % 12 == 0 and hidden // 12 >= 16:
        return 12
    for heads in range(min(12, hidden // 16), 0, -1):
        if hidden % heads == 0:
            return heads
    return 1


def parse_shape(spec: str) -> StudentShape:
    """A preset name or ``LxH`` (e.g. ``3x384``: 3 layers, hidden 384, heads and FFN derived)."""
    if spec in PRESETS:
        return PRESETS[spec]
    match = re.fullmatch(r"(\d+)\s*[xX]\s*(\d+)", spec.strip())
    if not match:
        raise CompressError(
            f"--student {spec!r} is neither a preset ({', '.join(PRESETS)}) nor LAYERSxHIDDEN such as 3x384. "
            "Run `bert-compress students` for the list."
        )
    layers, hidden = int(match.group(1)), int(match.group(2))
    if layers < 1 or hidden < 16:
        raise CompressError(f"--student {spec!r}: need at least 1 layer and a hidden size of at least 16.")
    return StudentShape(layers, hidden, default_heads(hidden), 4 * hidden, f"{layers}x{hidden}")


def estimate_parameters(shape: StudentShape, vocab_size: int = 30522, max_positions: int = 512,
                        type_vocab: int = 2, num_labels: int = 2) -> int:
    """Parameter count of a BERT encoder of this shape with a pooler and a classifier."""
    h, f = shape.hidden, shape.ffn
    embeddings = (vocab_size + max_positions + type_vocab) * h + 2 * h
    layer = 4 * (h * h + h) + (h * f + f) + (f * h + h) + 2 * 2 * h
    pooler = h * h + h
    classifier = h * num_labels + num_labels
    return embeddings + shape.layers * layer + pooler + classifier
