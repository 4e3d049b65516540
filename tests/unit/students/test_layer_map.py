"""Layer maps for several depth ratios, explicit maps and their errors."""

import pytest

from students.layer_map import format_layer_map, parse_layer_map, uniform_layer_map
from compress.core.errors import CompressError


@pytest.mark.parametrize("teacher, student, expected", [
    (12, 6, [1, 3, 5, 7, 9, 11]),
    (12, 4, [2, 5, 8, 11]),
    (12, 3, [3, 7, 11]),
    (12, 5, [1, 4, 6, 9, 11]),
    (6, 6, [0, 1, 2, 3, 4, 5]),
    (6, 1, [5]),
])
def test_uniform_maps(teacher, student, expected):
    pairs = uniform_layer_map(teacher, student)
    assert list(pairs) == list(range(student))
    assert list(pairs.values()) == expected
    assert pairs[student - 1] == teacher - 1  # the top layers always meet


def test_explicit_map_and_round_trip():
    pairs = parse_layer_map("0:1, 1:3,2:11", 12, 3)
    assert pairs == {0: 1, 1: 3, 2: 11}
    assert format_layer_map(pairs) == "0:1,1:3,2:11"
    assert parse_layer_map("uniform", 12, 3) == uniform_layer_map(12, 3)


@pytest.mark.parametrize("spec, message", [
    ("0:1,0:2", "mapped twice"),
    ("3:1", "student layer 3 does not exist"),
    ("0:12", "teacher layer 12 does not exist"),
    ("zero:one", "is not STUDENT:TEACHER"),
])
def test_explicit_map_errors(spec, message):
    with pytest.raises(CompressError, match=message):
        parse_layer_map(spec, 12, 3)


def test_student_deeper_than_teacher_is_refused():
    with pytest.raises(CompressError, match="must not be deeper"):
        uniform_layer_map(4, 6)
