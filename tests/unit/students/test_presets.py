"""Student presets: shapes, LxH parsing and parameter counts against real models."""

import pytest

from compress.core.errors import CompressError
from students.presets import PRESETS, default_heads, estimate_parameters, parse_shape


def test_preset_shapes():
    assert (PRESETS["tinybert-6l-384"].layers, PRESETS["tinybert-6l-384"].hidden, PRESETS["tinybert-6l-384"].heads,
            PRESETS["tinybert-6l-384"].ffn) == (6, 384, 12, 1536)
    assert (PRESETS["tinybert-4l-312"].layers, PRESETS["tinybert-4l-312"].hidden, PRESETS["tinybert-4l-312"].ffn) == (4, 312, 1200)
    assert (PRESETS["distil-6l-768"].layers, PRESETS["distil-6l-768"].hidden, PRESETS["distil-6l-768"].ffn) == (6, 768, 3072)


@pytest.mark.parametrize("spec, shape", [
    ("3x384", (3, 384, 12, 1536)),
    ("6X768", (6, 768, 12, 3072)),
    ("2x128", (2, 128, 8, 512)),
    ("4x100", (4, 100, 5, 400)),
])
def test_lxh_shapes(spec, shape):
    s = parse_shape(spec)
    assert (s.layers, s.hidden, s.heads, s.ffn) == shape
    assert s.hidden % s.heads == 0


@pytest.mark.parametrize("spec", ["tinybert", "6x", "0x384", "3x8"])
def test_bad_presets(spec):
    with pytest.raises(CompressError, match="--student"):
        parse_shape(spec)


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_parameter_count_matches_a_built_model(name):
    from transformers import BertConfig, BertForSequenceClassification

    s = PRESETS[name]
    config = BertConfig(num_hidden_layers=s.layers, hidden_size=s.hidden, num_attention_heads=s.heads,
                        intermediate_size=s.ffn, num_labels=2)
    model = BertForSequenceClassification(config)
    assert estimate_parameters(s) == sum(p.numel() for p in model.parameters())


def test_minilm_sized_preset_is_22_7m():
    assert round(estimate_parameters(PRESETS["tinybert-6l-384"]) / 1e6, 1) == 22.7


def test_default_heads_divides_width():
    for hidden in (64, 96, 128, 200, 312, 384, 512, 768):
        assert hidden % default_heads(hidden) == 0
