"""How a caught third-party failure is quoted: the quantize/optimize reports and the user-facing errors
of export and OpenVINO quote one line of it, never a stack dump, and never fail on an empty message."""

from compress.core.errors import describe, first_line


def test_an_empty_message_is_quoted_as_nothing():
    assert first_line(ValueError()) == ""
    assert first_line(RuntimeError("")) == ""
    assert describe(KeyError()) == "KeyError: "


def test_only_the_first_line_is_kept():
    exc = RuntimeError("[ONNXRuntimeError] : 1 : FAIL : node MatMul_3\nstack frame 1\nstack frame 2")
    assert first_line(exc) == "[ONNXRuntimeError] : 1 : FAIL : node MatMul_3"
    assert describe(exc) == "RuntimeError: [ONNXRuntimeError] : 1 : FAIL : node MatMul_3"


def test_the_line_is_cut_at_exactly_the_limit():
    long = "x" * 299 + "yz" + "w" * 50
    assert first_line(ValueError(long)) == "x" * 299 + "y"
    assert len(describe(ValueError(long))) == len("ValueError: ") + 300
    assert first_line(ValueError("abcdef"), limit=3) == "abc"
    assert describe(ValueError("abcdef"), 4) == "ValueError: abcd"
    assert first_line(ValueError("x" * 300)) == "x" * 300


def test_a_message_that_starts_with_a_newline_quotes_its_empty_first_line():
    # splitlines() keeps the empty first line: the quote stays the message's own first line
    assert first_line(ValueError("\nsecond")) == ""
