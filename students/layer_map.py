"""Teacher-to-student layer maps and the projections that bridge different widths.

A map pairs each distilled student layer with a teacher layer, both 0-based transformer-layer
indices: ``{0: 1, 1: 3}`` means student layer 0 learns from teacher layer 1. Hidden-state losses
compare the outputs of paired layers (``hidden_states[s + 1]`` against ``hidden_states[t + 1]``);
attention losses compare their attention maps; embeddings are always paired with embeddings.
Any depth ratio works (12 to 5 included), so no one writes a map by hand unless they want to.
"""

from __future__ import annotations

from compress.core.errors import CompressError


def uniform_layer_map(teacher_layers: int, student_layers: int) -> dict[int, int]:
    """Student layer ``s`` learns from teacher layer ``round((s + 1) * T / S) - 1``.

    The top student layer always pairs with the top teacher layer (TinyBERT's uniform strategy,
    generalised to depths that do not divide: 12 to 5 gives 1, 4, 6, 9, 11).
    """
    if student_layers < 1 or teacher_layers < 1:
        raise CompressError("layer maps need at least one teacher and one student layer")
    if student_layers > teacher_layers:
        raise CompressError(f"the student has {student_layers} layers but the teacher only {teacher_layers}; "
                            "a student must not be deeper than its teacher.")
    return {s: int(round((s + 1) * teacher_layers / student_layers)) - 1 for s in range(student_layers)}


def parse_layer_map(spec: str | dict[int, int] | None, teacher_layers: int, student_layers: int) -> dict[int, int]:
    """``uniform`` (or empty) for the generated map, or ``"S:T,S:T,..."`` given explicitly."""
    if spec is None or spec == "uniform" or spec == "":
        return uniform_layer_map(teacher_layers, student_layers)
    if isinstance(spec, dict):
        pairs = {int(k): int(v) for k, v in spec.items()}
    else:
        pairs = {}
        for item in str(spec).split(","):
            item = item.strip()
            if not item:
                continue
            try:
                s, t = (int(x) for x in item.split(":"))
            except ValueError:
                raise CompressError(f"--layer-map: {item!r} is not STUDENT:TEACHER (e.g. \"0:1,1:3,2:5\")") from None
            if s in pairs:
                raise CompressError(f"--layer-map: student layer {s} is mapped twice")
            pairs[s] = t
    for s, t in pairs.items():
        if not 0 <= s < student_layers:
            raise CompressError(f"--layer-map: student layer {s} does not exist (the student has layers 0..{student_layers - 1})")
        if not 0 <= t < teacher_layers:
            raise CompressError(f"--layer-map: teacher layer {t} does not exist (the teacher has layers 0..{teacher_layers - 1})")
    if not pairs:
        raise CompressError("--layer-map is empty; use 'uniform' or pairs such as \"0:1,1:3\"")
    return dict(sorted(pairs.items()))


def format_layer_map(pairs: dict[int, int]) -> str:
    return ",".join(f"{s}:{t}" for s, t in sorted(pairs.items()))
