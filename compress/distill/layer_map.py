"""Teacher-to-student layer maps: they live in :mod:`students.layer_map` (the student factory needs them
without importing the distill stage); the distill stage imports them from here."""

from students.layer_map import format_layer_map, parse_layer_map, uniform_layer_map

__all__ = ["format_layer_map", "parse_layer_map", "uniform_layer_map"]
