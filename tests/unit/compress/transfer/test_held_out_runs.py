"""HeldOutRuns: a corpus line that repeats a held-out sentence, whole or inside a longer line, is caught."""

from __future__ import annotations

from compress.corpora.texts import HeldOutRuns

HELD_OUT = ["The Ivorian club ASEC Mimosas won it in 1994 .", "Ride the wave tonight", "No brainer ."]


def test_a_line_equal_to_a_held_out_sentence_under_another_spelling_is_caught():
    runs = HeldOutRuns.of(HELD_OUT)
    assert runs.repeats("the ivorian club ASEC Mimosas won it in 1994!")
    assert runs.repeats("No brainer.")  # two words: caught only when the line is exactly it


def test_a_held_out_sentence_inside_a_longer_line_is_caught_by_a_six_word_run():
    runs = HeldOutRuns.of(HELD_OUT)
    assert runs.repeats("[ here ] ( link ) - as the Ivorian club ASEC Mimosas won it, 108 goals in league matches")
    assert not runs.repeats("by the Ivorian club, 108 goals in league matches")  # five shared words in a row


def test_a_short_held_out_sentence_is_caught_whole_inside_a_line_and_a_two_word_one_is_not():
    runs = HeldOutRuns.of(HELD_OUT)
    assert runs.repeats("get ready to ride the wave tonight at 8 https://t.co/x")  # four words, all of them
    assert not runs.repeats("get ready to ride the wave at 8")  # not all four in a row
    assert not runs.repeats("this one was a no brainer really")  # two common words are no evidence


def test_the_run_length_is_a_setting():
    line = "by the Ivorian club, 108 goals"
    assert not HeldOutRuns.of(HELD_OUT, n=6).repeats(line)
    assert HeldOutRuns.of(HELD_OUT, n=3).repeats(line)
