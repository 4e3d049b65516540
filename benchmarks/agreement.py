"""Agreement of a model with its reference where no gold label is needed: by row origin, and on traffic.

Agreement (the share of inputs where two models predict the same label) needs no gold label, so
it can be measured where accuracy cannot:

- **By row origin** (:func:`agreement_by_origin`, printed by ``python -m tools.studies.origins``):
  the student's agreement with its teacher on the rows it was trained on (the labelled training
  rows and the transfer rows: augmented variants, unlabelled text) against the held-out splits.
  The student's disagreement on held-out text splits into a *fit* part (it does not reproduce the
  teacher even on its own training rows: optimisation, schedule or capacity) and a *generalisation*
  part (it reproduces the teacher on the rows it saw but not on new ones: more, or better-matched,
  transfer data); :func:`gap_diagnosis` says which is larger, with the numbers. Rows differ in how
  sure the teacher is of them (sentences cut from whole reviews are far more often borderline than the
  task's own), and agreement on a borderline row is near a coin toss for any student, so the trained
  rows' agreement is compared at the held-out rows' mix of teacher confidence
  (:func:`agreement_by_band`, :func:`matched_agreement`: direct standardisation over bands); without
  it, a transfer set full of borderline rows reads as a student that cannot fit. Intervals per
  origin are **Wilson** score intervals: close to their nominal coverage at every n, and not
  degenerate at 100% agreement (where the Wald interval collapses to a point); this is a
  diagnosis, not a CI verdict, so the exact but conservative Clopper-Pearson interval the gate
  uses is not needed here.
- **On the user's own traffic** (:func:`traffic_agreement`, recorded by ``bench --traffic-file``):
  unlabelled production text, where a student trained on another source hurts its users most.
  The interval there is **Clopper-Pearson**, the one ``min_agreement`` is decided on, because the
  gate's ``min_traffic_agreement`` decides on it too. The most confident disagreements are listed
  so a user sees *what* the student gets wrong: confidence is that of the less confident of the two
  models (both sure, opposite answers, ranks first; a disagreement where either model hesitates
  is a borderline text, not a clear failure).
"""

from __future__ import annotations

import bisect
import math
from pathlib import Path
from statistics import NormalDist
from typing import Any, Mapping, Sequence

import numpy as np

from compress.core.stats import DEFAULT_CONFIDENCE, Interval
from compress.core.stats import proportion_interval

#: Disagreements listed per artifact in results.json.
TOP_DISAGREEMENTS = 20


def wilson_interval(successes: int, n: int, confidence: float = DEFAULT_CONFIDENCE) -> Interval:
    """Wilson score interval of ``successes / n``."""
    if n < 1:
        raise ValueError("proportion of no trials")
    if not 0 <= successes <= n:
        raise ValueError(f"{successes} successes out of {n}")
    z = NormalDist().inv_cdf(1 - (1 - confidence) / 2)
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return Interval(p, max(0.0, centre - half), min(1.0, centre + half), confidence, f"Wilson over {n} rows")


def agreement_by_origin(predictions: Sequence[int], reference_predictions: Sequence[int], origins: Sequence[str],
                        confidence: float = DEFAULT_CONFIDENCE) -> dict[str, dict[str, Any]]:
    """``{origin: {"n", "agreeing", "agreement", "low", "high"}}``, origins in order of first appearance."""
    pred, ref, where = np.asarray(predictions), np.asarray(reference_predictions), np.asarray(origins)
    if not pred.shape == ref.shape == where.shape:
        raise ValueError(f"predictions, reference predictions and origins differ in length: {pred.shape[0]}, "
                         f"{ref.shape[0]}, {where.shape[0]}")
    out: dict[str, dict[str, Any]] = {}
    for origin in dict.fromkeys(where.tolist()):
        mask = where == origin
        agreeing, n = int((pred[mask] == ref[mask]).sum()), int(mask.sum())
        interval = wilson_interval(agreeing, n, confidence)
        out[str(origin)] = {"n": n, "agreeing": agreeing, "agreement": interval.estimate, "low": interval.low,
                            "high": interval.high}
    return out


#: Bands of the reference's confidence (its top probability) that the matched diagnosis compares within.
CONFIDENCE_BANDS = (0.7, 0.9)


def band_labels(edges: Sequence[float] = CONFIDENCE_BANDS) -> list[str]:
    """The bands' labels in increasing confidence: ``"<0.7"``, ``"0.7-0.9"``, ``">=0.9"`` for the default edges."""
    return ([f"<{edges[0]:g}"] + [f"{low:g}-{high:g}" for low, high in zip(edges, edges[1:])]
            + [f">={edges[-1]:g}"])


def band_of(confidence: float, edges: Sequence[float] = CONFIDENCE_BANDS) -> str:
    """The label of the band ``confidence`` falls in (a band holds its lower edge)."""
    return band_labels(edges)[bisect.bisect_right(edges, confidence)]


def agreement_by_band(predictions: Sequence[int], reference_predictions: Sequence[int],
                      reference_confidence: Sequence[float], origins: Sequence[str],
                      edges: Sequence[float] = CONFIDENCE_BANDS) -> dict[str, dict[str, dict[str, Any]]]:
    """``{origin: {band: {"n", "agreeing", "agreement", "share"}}}``: agreement within each band of the reference's
    confidence, and the band's share of the origin's rows; bands in increasing confidence, empty ones left out."""
    pred, ref, where = np.asarray(predictions), np.asarray(reference_predictions), np.asarray(origins)
    order = band_labels(edges)
    bands = np.asarray([order[bisect.bisect_right(edges, float(c))] for c in reference_confidence])
    if not pred.shape == ref.shape == where.shape == bands.shape:
        raise ValueError("predictions, reference predictions, confidences and origins differ in length")
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for origin in dict.fromkeys(where.tolist()):
        rows = where == origin
        out[str(origin)] = {}
        for band in order:
            mask = rows & (bands == band)
            if mask.any():
                agreeing, n = int((pred[mask] == ref[mask]).sum()), int(mask.sum())
                out[str(origin)][band] = {"n": n, "agreeing": agreeing, "agreement": agreeing / n,
                                          "share": n / int(rows.sum())}
    return out


def matched_agreement(by_band: Mapping[str, Mapping[str, Mapping[str, Any]]], origins: Sequence[str],
                      like: Sequence[str]) -> tuple[float, float, list[str]]:
    """``(agreement, variance, bands left out)`` of the ``origins`` rows pooled, re-weighted to the band mix of the
    ``like`` rows: ``sum_b w_b a_b`` with ``w_b`` the ``like`` rows' share in band ``b`` and ``a_b`` the origins'
    agreement there (variance ``sum_b w_b^2 a_b (1 - a_b) / n_b``, the mix taken as given). A band the ``like``
    rows have but ``origins`` do not is left out and the other weights renormalised."""
    target: dict[str, int] = {}
    for o in like:
        for band, row in by_band.get(o, {}).items():
            target[band] = target.get(band, 0) + row["n"]
    seen: dict[str, list[int]] = {}
    for o in origins:
        for band, row in by_band.get(o, {}).items():
            cell = seen.setdefault(band, [0, 0])
            cell[0] += row["agreeing"]
            cell[1] += row["n"]
    missing = [b for b in target if b not in seen]
    total = sum(n for b, n in target.items() if b in seen)
    if not total:
        raise ValueError("a matched diagnosis needs trained rows in at least one band the held-out rows have")
    estimate = variance = 0.0
    for band, n in target.items():
        if band in seen:
            w, a = n / total, seen[band][0] / seen[band][1]
            estimate += w * a
            variance += w * w * a * (1 - a) / seen[band][1]
    return estimate, variance, missing


def _pooled(by_origin: Mapping[str, Mapping[str, Any]], origins: Sequence[str]) -> tuple[float, int]:
    """``(agreement, rows)`` of the given origins together."""
    rows = [by_origin[o] for o in origins if o in by_origin]
    n = sum(r["n"] for r in rows)
    if not n:
        raise ValueError("a diagnosis needs rows the student trained on and held-out rows")
    return sum(r["agreeing"] for r in rows) / n, n


def gap_diagnosis(by_origin: Mapping[str, Mapping[str, Any]], trained: Sequence[str], held_out: Sequence[str],
                  confidence: float = DEFAULT_CONFIDENCE,
                  by_band: Mapping[str, Mapping[str, Mapping[str, Any]]] | None = None) -> dict[str, Any]:
    """Where the student's disagreement with its teacher on held-out rows comes from.

    ``fit`` is the disagreement on the rows it trained on (``trained`` origins pooled), ``generalisation``
    the agreement lost from those rows to the held-out ones (``held_out`` pooled): together they are
    the held-out disagreement. The verdict names the larger part when the normal interval of
    ``generalisation - fit = 2 seen - 1 - new`` (two proportions over different rows: unpaired, so
    its variance is ``4 var(seen) + var(new)``) leaves out zero, and says *undecided* otherwise.
    ``generalisation_interval`` is the generalisation part's own interval, for the report.

    With ``by_band`` (:func:`agreement_by_band`) the trained rows' agreement is taken at the held-out rows' mix
    of teacher confidence (:func:`matched_agreement`; ``matched`` in the result says so, with the bands left
    out), so that borderline transfer rows do not count as a failure to fit.
    """
    seen, n1 = _pooled(by_origin, trained)
    new, n2 = _pooled(by_origin, held_out)
    var_seen, var_new = seen * (1 - seen) / n1, new * (1 - new) / n2
    matched: dict[str, Any] | None = None
    if by_band is not None:
        unmatched = seen
        seen, var_seen, missing = matched_agreement(by_band, trained, held_out)
        matched = {"to": "the held-out rows' mix of teacher confidence", "unmatched_trained_agreement": unmatched,
                   "bands_left_out": missing}
    fit, generalisation = 1 - seen, seen - new
    z = NormalDist().inv_cdf(1 - (1 - confidence) / 2)
    half = z * math.sqrt(var_seen + var_new)
    gen_low, gen_high = generalisation - half, generalisation + half
    lead = generalisation - fit
    lead_half = z * math.sqrt(4 * var_seen + var_new)
    if lead - lead_half > 0:
        verdict = "data"
        why = ("the student reproduces its teacher on the rows it trained on but not on new text: more (or "
               "better-matched) transfer data should close it")
    elif lead + lead_half < 0:
        verdict = "optimisation"
        why = ("the student does not reproduce its teacher even on its own training rows: the schedule, the loss or "
               "its capacity limits it before the data does")
    else:
        verdict = "undecided"
        why = "the two parts cannot be told apart at this many rows; measure more rows per origin"
    return {"verdict": verdict, "fit": fit, "generalisation": generalisation,
            "generalisation_interval": [gen_low, gen_high], "lead_interval": [lead - lead_half, lead + lead_half],
            "trained_agreement": seen, "held_out_agreement": new, "trained": list(trained), "held_out": list(held_out),
            "explanation": why, "matched": matched}


def confident_disagreements(probabilities: np.ndarray, reference_probabilities: np.ndarray, texts: Sequence[Any],
                            label_names: Sequence[str], top: int = TOP_DISAGREEMENTS) -> list[dict[str, Any]]:
    """The ``top`` inputs where the two models disagree, most confident first (the lower of the two confidences;
    ties by the input's position, so the list is reproducible)."""
    probs, ref = np.asarray(probabilities, dtype=float), np.asarray(reference_probabilities, dtype=float)
    pred, ref_pred = probs.argmax(-1), ref.argmax(-1)
    conf, ref_conf = probs.max(-1), ref.max(-1)
    disagree = np.flatnonzero(pred != ref_pred)
    order = disagree[np.lexsort((disagree, -np.minimum(conf[disagree], ref_conf[disagree])))][:top]
    out = []
    for i in order:
        text = texts[int(i)]
        entry: dict[str, Any] = {"index": int(i)}
        if isinstance(text, (tuple, list)):
            entry["text"], entry["text_pair"] = str(text[0]), str(text[1])
        else:
            entry["text"] = str(text)
        entry.update(label=label_names[int(pred[i])], confidence=float(conf[i]),
                     reference_label=label_names[int(ref_pred[i])], reference_confidence=float(ref_conf[i]))
        out.append(entry)
    return out


def traffic_agreement(probabilities: np.ndarray, reference_probabilities: np.ndarray, texts: Sequence[Any],
                      label_names: Sequence[str], confidence: float = DEFAULT_CONFIDENCE,
                      top: int = TOP_DISAGREEMENTS) -> dict[str, Any]:
    """What ``results.json`` records for one artifact under ``traffic_agreement`` (see docs/bench-schema.md)."""

    pred = np.asarray(probabilities).argmax(-1)
    ref_pred = np.asarray(reference_probabilities).argmax(-1)
    if len(pred) != len(ref_pred) or len(pred) != len(texts) or not len(pred):
        raise ValueError("traffic agreement needs one prediction per text from both models, and some texts")
    agreeing = int((pred == ref_pred).sum())
    interval = proportion_interval(agreeing, len(pred), confidence)
    return {"n": int(len(pred)), "agreeing": agreeing, "agreement": interval.estimate,
            "ci": [interval.low, interval.high], "confidence": confidence, "method": interval.method,
            "predictions": [int(p) for p in pred],
            "disagreements": confident_disagreements(probabilities, reference_probabilities, texts, label_names, top)}


def _cell(text: str, width: int = 100) -> str:
    text = " ".join(str(text).split()).replace("|", "\\|")
    return text if len(text) <= width else text[:width - 1] + "…"


def traffic_agreement_section(results: Mapping[str, Any], shown: int = 5) -> list[str]:
    """The report's Markdown section for ``bench --traffic-file`` (nothing when it was not measured)."""
    info = (results.get("settings") or {}).get("traffic_file")
    arts = [a for a in results.get("artifacts", []) if a.get("traffic_agreement")]
    if not info or not arts:
        return []
    out = ["", f"## Agreement on traffic: `{Path(info['path']).name}` ({info['texts']:,} texts)", "",
           f"Unlabelled texts of the user's own traffic: the share on which each artifact predicts what the reference "
           f"`{results['reference']}` predicts, with its {100 * arts[0]['traffic_agreement']['confidence']:g}% "
           "Clopper-Pearson interval (gate rule `min_traffic_agreement`).", "",
           "| artifact | kind | agreement | interval | disagreements |", "|---|---|---:|---:|---:|"]
    for a in arts:
        t = a["traffic_agreement"]
        out.append(f"| `{a['name']}`{' (reference)' if a['is_reference'] else ''} | {a['kind']} | "
                   f"{100 * t['agreement']:.2f}% | [{100 * t['ci'][0]:.2f}, {100 * t['ci'][1]:.2f}]% | "
                   f"{t['n'] - t['agreeing']:,} |")
    for a in arts:
        listed = a["traffic_agreement"]["disagreements"][:shown]
        if a["is_reference"] or not listed:
            continue
        out += ["", f"Most confident disagreements of `{a['name']}` (the lower of the two confidences first):", "",
                f"| text | `{a['name']}` | reference |", "|---|---|---|"]
        out += [f"| {_cell(d['text'] + (' / ' + d['text_pair'] if 'text_pair' in d else ''))} | {d['label']} "
                f"({d['confidence']:.2f}) | {d['reference_label']} ({d['reference_confidence']:.2f}) |" for d in listed]
    return out


def traffic_agreement_lines(results: Mapping[str, Any]) -> list[str]:
    """What ``bench`` prints about the traffic agreement: one line per artifact (nothing when not measured)."""
    info = (results.get("settings") or {}).get("traffic_file")
    if not info:
        return []
    lines = [f"agreement with {results['reference']} on --traffic-file {info['path']} ({info['texts']:,} texts):"]
    for a in results.get("artifacts", []):
        t = a.get("traffic_agreement")
        if t and not a["is_reference"]:
            lines.append(f"  {a['name']:<28}{100 * t['agreement']:6.2f}%  [{100 * t['ci'][0]:.2f}, "
                         f"{100 * t['ci'][1]:.2f}]  {t['n'] - t['agreeing']:,} disagreements")
    return lines
