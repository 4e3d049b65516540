"""QA features: gold answers found again from the windows of real SQuAD questions, and n-best decoding of
hand-made start/end logits (best span over windows, max answer length, question tokens refused, null answer)."""

from __future__ import annotations

import numpy as np
import pytest

from compress.core.errors import CompressError
from compress.tasks.question_answering.features import (NEVER_NULL, NULL_INDEX, answer_positions, apply_null_threshold, decode_spans,
                                        encode_qa, first_answer_spans, null_margins, qa_features, span_chars)
from tests.conftest import make_tokenizer


@pytest.fixture(scope="module")
def tok():
    return make_tokenizer()


@pytest.fixture(scope="module")
def squad():
    from compress.tasks.question_answering.data import squad_dev

    return squad_dev()


def _recover(features, rows):
    """Per question: the windows that point at an answer, and the passage text each one points at."""
    found: dict[int, list[str]] = {}
    for w in range(len(features)):
        s, e = int(features.start_positions[w]), int(features.end_positions[w])
        if (s, e) == (NULL_INDEX, NULL_INDEX):
            continue
        i = int(features.windows.sample[w])
        a, b = span_chars(features.windows, w, s, e)
        found.setdefault(i, []).append(rows["context"][i][a:b])
    return found


def _holds(windows, w, span) -> bool:
    """Whether window ``w``'s passage tokens cover the characters ``span`` wholly."""
    a, b = windows.segment[w]
    return windows.offsets[w][a][0] <= span[0] and windows.offsets[w][b - 1][1] >= span[1]


def test_every_training_answer_of_300_real_questions_is_found_again_from_the_windows(tok, squad):
    rows = squad.splits["train"].select(range(300))[:]
    features = qa_features(tok, rows["question"], rows["context"], rows["answers"], max_length=128, doc_stride=32)
    windows = features.windows
    assert max(len(x) for x in windows.input_ids) == 128 and len(windows) > 450  # many passages need 2-4 windows
    found = _recover(features, rows)
    # Stated: of these 300 questions none is lost (no answer straddles two windows' edges) and none starts or ends
    # inside a word piece, so every first gold answer is found again, character for character.
    missing = [i for i in range(300) if i not in found]
    differs = [i for i, texts in found.items() for t in texts if t != rows["answers"][i]["text"][0]]
    assert (missing, differs) == ([], [])
    spans = first_answer_spans(rows["answers"])
    later = 0
    for w in range(len(windows)):
        i = int(windows.sample[w])
        points = (features.start_positions[w], features.end_positions[w]) != (NULL_INDEX, NULL_INDEX)
        assert points == _holds(windows, w, spans[i]), (w, i)  # [CLS] exactly where the window lacks the answer
        later += points and w != windows.windows_of(i)[0]
    assert later > 50  # answers found in second and later windows too, not only in the first


@pytest.mark.slow
def test_on_the_whole_builtin_set_the_lost_answers_are_the_stated_few(tok, squad):
    import datasets

    rows = datasets.concatenate_datasets([squad.splits[s] for s in ("train", "validation", "test")])[:]
    features = qa_features(tok, rows["question"], rows["context"], rows["answers"], max_length=128, doc_stride=32)
    found = _recover(features, rows)
    missing = [rows["id"][i] for i in range(len(rows["id"])) if i not in found]
    # One answer of 43 word pieces straddles a window edge: windows overlap by 32 tokens only.
    assert missing == ["572648d1708984140094c161"]
    differs = {i: t for i, texts in found.items() for t in texts if t != rows["answers"][i]["text"][0]}
    # 32 gold answers begin or end inside a word piece ('four' of 'fourth', '20,980' of '£20,980'): the tokens
    # that hold them give the answer widened to whole pieces.
    assert len(differs) == 32
    assert all(rows["answers"][i]["text"][0] in t for i, t in differs.items())


def test_an_answer_inside_a_word_piece_and_a_question_without_one(tok):
    context = "They met in the 1990s and again in Paris."
    windows = encode_qa(tok, ["  When?", "Where?"], [context, context], max_length=64, doc_stride=8)
    assert tok.convert_ids_to_tokens(windows.input_ids[0])[:4] == ["[CLS]", "when", "?", "[SEP]"]  # lstripped
    starts, ends = answer_positions(windows, [(16, 20), None])  # '1990' of '1990s'
    a, b = span_chars(windows, 0, int(starts[0]), int(ends[0]))
    assert context[a:b] == "1990s" and (starts[1], ends[1]) == (NULL_INDEX, NULL_INDEX)


# ----------------------------------------------------------------------------- decoding


CONTEXT = ("The river Seine flows through Paris. The river Loire is longer and flows to the Atlantic. "
           "Lyon lies on the Rhone, a river from Switzerland.")


@pytest.fixture(scope="module")
def long_windows(tok):
    windows = encode_qa(tok, ["Which river flows through Paris?"], [CONTEXT], max_length=24, doc_stride=6)
    assert len(windows) >= 3
    return windows


def _position(tok, windows, w, word) -> int:
    """The position of ``word``'s first piece among window ``w``'s passage tokens."""
    a, b = windows.segment[w]
    pieces = tok.convert_ids_to_tokens(windows.input_ids[w])
    return next(p for p in range(a, b) if pieces[p] == word)


def _logits(windows, marks):
    """Zero logits with ``marks[(w, 'start'|'end', position)] = value``."""
    start = [np.zeros(len(x)) for x in windows.input_ids]
    end = [np.zeros(len(x)) for x in windows.input_ids]
    for (w, which, p), value in marks.items():
        (start if which == "start" else end)[w][p] = value
    return start, end


def _windows_with(tok, windows, word):
    return [w for w in range(len(windows)) if word in tok.convert_ids_to_tokens(windows.input_ids[w])
            [windows.segment[w][0]:windows.segment[w][1]]]


def test_the_best_span_over_all_windows_is_mapped_back_to_the_passage(tok, long_windows):
    w_seine, w_rhone = _windows_with(tok, long_windows, "seine")[0], _windows_with(tok, long_windows, "rhone")[-1]
    assert w_seine != w_rhone
    s1 = _position(tok, long_windows, w_seine, "seine")
    s2 = _position(tok, long_windows, w_rhone, "rhone")
    start, end = _logits(long_windows, {(w_seine, "start", s1): 4.0, (w_seine, "end", s1): 4.0,
                                        (w_rhone, "start", s2 - 1): 6.0, (w_rhone, "end", s2): 5.0})
    out = decode_spans(long_windows, start, end, [CONTEXT], n_best=5)[0]
    assert out["answer"] == "the Rhone" and CONTEXT[out["start"]:out["end"]] == "the Rhone"
    assert out["logit"] == 11.0 and out["n_best"][0]["answer"] == "the Rhone"
    assert "Seine" in [c["answer"] for c in out["n_best"]]
    assert abs(sum(c["probability"] for c in out["n_best"]) - 1) < 1e-9 and out["score"] == out["n_best"][0]["probability"]
    # Padded rows (a batch's) decode the same.
    width = max(len(x) for x in start)
    pad = lambda rows: np.stack([np.pad(r, (0, width - len(r)), constant_values=50.0) for r in rows])  # noqa: E731
    assert decode_spans(long_windows, pad(start), pad(end), [CONTEXT], n_best=5)[0]["answer"] == "the Rhone"


def test_max_answer_length_and_end_before_start_are_respected(tok, long_windows):
    w = _windows_with(tok, long_windows, "seine")[0]
    first = _position(tok, long_windows, w, "river")
    last = _position(tok, long_windows, w, "paris")
    start, end = _logits(long_windows, {(w, "start", first): 9.0, (w, "end", last): 9.0, (w, "end", first + 1): 2.0,
                                        (w, "start", last): 1.0})
    span = last - first + 1
    long = decode_spans(long_windows, start, end, [CONTEXT], max_answer_length=span)[0]
    assert long["answer"] == "river Seine flows through Paris"
    short = decode_spans(long_windows, start, end, [CONTEXT], max_answer_length=span - 1)[0]
    assert short["answer"] == "river Seine" and short["logit"] == 11.0
    assert all(c["end"] - c["start"] <= len("river Seine flows through Paris") for c in short["n_best"])
    # An end before its start never counts, however high.
    start, end = _logits(long_windows, {(w, "start", last): 9.0, (w, "end", first): 9.0})
    out = decode_spans(long_windows, start, end, [CONTEXT])[0]
    assert all(c["start"] <= c["end"] for c in out["n_best"]) and out["logit"] < 18.0
    assert out["start"] >= CONTEXT.index("Paris")  # the one high logit usable is the start on Paris


def test_spans_in_the_question_or_on_special_tokens_are_refused(tok, long_windows):
    w = _windows_with(tok, long_windows, "seine")[0]
    a, _ = long_windows.segment[w]
    pieces = tok.convert_ids_to_tokens(long_windows.input_ids[w])
    q_paris = next(p for p in range(1, a) if pieces[p] == "paris")  # 'Paris' of the question
    seine = _position(tok, long_windows, w, "seine")
    marks = {(w, "start", q_paris): 20.0, (w, "end", q_paris): 20.0, (w, "start", a - 1): 15.0, (w, "end", a - 1): 15.0,
             (w, "start", seine): 1.0, (w, "end", seine): 1.0}
    out = decode_spans(long_windows, *_logits(long_windows, marks), [CONTEXT])[0]
    assert out["answer"] == "Seine" and out["logit"] == 2.0
    assert all(c["answer"] for c in out["n_best"])


def test_the_null_answer_wins_only_past_the_threshold(tok, long_windows):
    w = _windows_with(tok, long_windows, "seine")[0]
    seine = _position(tok, long_windows, w, "seine")
    marks = {(w, "start", seine): 3.0, (w, "end", seine): 3.0}
    for k in range(len(long_windows)):  # the null score is the smallest over the windows: 4 + 4 here
        marks[(k, "start", NULL_INDEX)] = 4.0 + k
        marks[(k, "end", NULL_INDEX)] = 4.0 + k
    start, end = _logits(long_windows, marks)
    v1 = decode_spans(long_windows, start, end, [CONTEXT])[0]
    assert v1["answer"] == "Seine" and v1["null_logit"] == 8.0  # SQuAD 1.1: never empty
    v2 = decode_spans(long_windows, start, end, [CONTEXT], allow_null=True)[0]
    assert (v2["answer"], v2["start"], v2["end"]) == ("", 0, 0) and v2["n_best"][0]["answer"] == ""
    assert v2["score"] == v2["n_best"][0]["probability"] > 0.5
    # null - best = 8 - 6 = 2: a threshold of 2 keeps the span, just below 2 gives the null answer.
    assert decode_spans(long_windows, start, end, [CONTEXT], allow_null=True, null_threshold=2.0)[0]["answer"] == "Seine"
    assert decode_spans(long_windows, start, end, [CONTEXT], allow_null=True, null_threshold=1.99)[0]["answer"] == ""


def test_any_null_threshold_from_one_decoding(tok):
    """A reading at NEVER_NULL turned into a threshold's answers is what decoding at that threshold gives, for
    questions whose null score sits below, between and above their spans (and one with no valid span)."""
    rng = np.random.default_rng(0)
    contexts = ["Paris is the capital of France and its largest city.", "The Seine flows through Paris.",
                "Berlin is in Germany.", "Rome is old."]
    windows = encode_qa(tok, ["Where?", "What flows?", "Where is Berlin?", "Old?"], contexts, max_length=24,
                        doc_stride=6)
    start = [rng.normal(0, 2, len(ids)) for ids in windows.input_ids]
    end = [rng.normal(0, 2, len(ids)) for ids in windows.input_ids]
    for i in range(3):  # a valid span in the first window of each of these (two starts and two ends are paired)
        w = int(windows.windows_of(i)[0])
        a, _ = windows.segment[w]
        start[w][a], end[w][a + 1] = 9.0, 9.0
    for w in windows.windows_of(3):  # no valid span: the two best starts come after the two best ends
        a, b = windows.segment[int(w)]
        start[int(w)][b - 2:b] = 9.0
        end[int(w)][a:a + 2] = 9.0
    read = dict(allow_null=True, n_best=2)
    raw = decode_spans(windows, start, end, contexts, null_threshold=NEVER_NULL, **read)
    margins = null_margins(raw)
    assert np.isinf(margins[3]) and raw[3]["answer"] == "" and np.isfinite(margins[:3]).all()
    keys = ("answer", "start", "end", "score", "logit", "window")
    for threshold in (-np.inf, *(margins[:3] - 1e-6), *margins[:3], 0.0, 5.0, np.inf):
        direct = decode_spans(windows, start, end, contexts, null_threshold=threshold, **read)
        applied = apply_null_threshold(raw, threshold)
        assert [{k: d[k] for k in keys} for d in applied] == [{k: d[k] for k in keys} for d in direct]
    assert {a["answer"] == "" for a in apply_null_threshold(raw, -np.inf)} == {True}
    v1 = decode_spans(windows, start, end, contexts, n_best=2, null_threshold=NEVER_NULL)  # SQuAD 1.1: no null
    assert apply_null_threshold(v1, -np.inf) == v1


def test_several_questions_and_bad_settings(tok):
    contexts = ["Paris is in France.", "Berlin is in Germany."]
    windows = encode_qa(tok, ["Where?", "Where?"], contexts, max_length=32, doc_stride=4)
    start, end = _logits(windows, {})
    for w in range(len(windows)):
        a, b = windows.segment[w]
        start[w][b - 2], end[w][b - 2] = 1.0, 1.0  # the last word before the full stop
    assert [o["answer"] for o in decode_spans(windows, start, end, contexts)] == ["France", "Germany"]
    with pytest.raises(CompressError, match=r"--max-answer-length must be a whole number of at least 1, got 0"):
        decode_spans(windows, start, end, contexts, max_answer_length=0)
    with pytest.raises(CompressError, match=r"--n-best must be a whole number"):
        decode_spans(windows, start, end, contexts, n_best=True)
    with pytest.raises(CompressError, match=r"2 questions but 1 passages"):
        encode_qa(tok, ["a", "b"], ["c"], max_length=32, doc_stride=4)
