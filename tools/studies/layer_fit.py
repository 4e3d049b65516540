"""How far apart are a student's and a teacher's hidden states? The ceiling of hidden-state distillation.

    python -m tools.studies.layer_fit --teacher runs/teacher --student minilm --data movie-reviews

For each pair of the uniform layer map (embeddings with embeddings, student layer s with teacher
layer t) it fits the best affine map from the student's token vectors to the teacher's (ridge
regression on 80% of the tokens of a few hundred training sentences) and reports, on the other 20%:
the mean squared error per unit of that best map, the teacher states' variance and energy (mean
square; what ``hidden_mse`` is when the student predicts zeros) and R². A ``hidden_mse`` that
stays near the energy during training means the learned projection is not even as good as a linear
fit of the *untrained* student, which is what a fresh projection trained at the student's small
learning rate looks like.

A study script, not a feature: it lives in ``tools/studies`` (not installed) and runs from a checkout.
Produced: docs/ablation.md, the "Layer fit" table of "The student: losses, pooling, learning rate".
"""

from __future__ import annotations

import argparse
from typing import Sequence


def _states(path, texts: list[str], batch: int = 50):
    import torch
    from transformers import AutoModel, AutoTokenizer

    from compress.runtime.modeling import quiet_transformers

    tok = AutoTokenizer.from_pretrained(str(path))
    with quiet_transformers():
        model = AutoModel.from_pretrained(str(path)).eval()
    chunks = []
    for i in range(0, len(texts), batch):
        enc = tok(texts[i:i + batch], padding=True, truncation=True, max_length=128, return_tensors="pt")
        with torch.inference_mode():
            out = model(**enc, output_hidden_states=True)
        mask = enc["attention_mask"].bool()
        chunks.append([h[mask] for h in out.hidden_states])
    return [torch.cat([c[layer] for c in chunks]).double() for layer in range(len(chunks[0]))]


def fit_table(teacher, student, texts: list[str], ridge: float = 1e-2) -> list[dict[str, float]]:
    """One row per mapped pair: ``student``, ``teacher`` (hidden-state indices, 0 = embeddings), ``mse``,
    ``variance``, ``energy``, ``r2``."""
    import torch

    from students.layer_map import uniform_layer_map

    t_states, s_states = _states(teacher, texts), _states(student, texts)
    pairs = [(0, 0)] + [(s + 1, t + 1) for s, t in uniform_layer_map(len(t_states) - 1, len(s_states) - 1).items()]
    n = t_states[0].shape[0]
    cut = int(0.8 * n)
    rows = []
    for s, t in pairs:
        x = torch.cat([s_states[s], torch.ones(n, 1, dtype=torch.float64)], 1)
        y = t_states[t]
        w = torch.linalg.solve(x[:cut].T @ x[:cut] + ridge * torch.eye(x.shape[1], dtype=x.dtype), x[:cut].T @ y[:cut])
        mse = float(((x[cut:] @ w - y[cut:]) ** 2).mean())
        variance = float(((y[cut:] - y[:cut].mean(0)) ** 2).mean())
        rows.append({"student": s, "teacher": t, "mse": mse, "variance": variance,
                     "energy": float((y[cut:] ** 2).mean()), "r2": 1 - mse / variance})
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    from compress.core.assets import resolve_model
    from compress.config import DataOptions

    parser = argparse.ArgumentParser(prog="python -m tools.studies.layer_fit", description=__doc__.split("\n\n")[0])
    parser.add_argument("--teacher", required=True, help="teacher artifact folder")
    parser.add_argument("--student", default="minilm", help="student folder or built-in name (default minilm)")
    parser.add_argument("--data", default="movie-reviews")
    parser.add_argument("--sentences", type=int, default=300, help="training sentences to use (default 300)")
    args = parser.parse_args(argv)
    task = DataOptions(args.data).load()
    texts = list(task.splits["train"]["text"][: args.sentences])
    rows = fit_table(resolve_model(args.teacher), resolve_model(args.student), texts)
    print("| student state | teacher state | best affine fit MSE | teacher variance | teacher energy | R² |")
    print("|---|---|---:|---:|---:|---:|")
    for r in rows:
        name = lambda i: "embeddings" if i == 0 else f"layer {i}"  # noqa: E731
        print(f"| {name(r['student'])} | {name(r['teacher'])} | {r['mse']:.4f} | {r['variance']:.4f} | "
              f"{r['energy']:.4f} | {r['r2']:.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
