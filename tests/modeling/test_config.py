"""The config's own checks: each refusal in full (a user reads it when a checkpoint's or a flag's
value is wrong), and the edges of each range, accepted on the right side."""

from __future__ import annotations

import re

import pytest

from tests.modeling import tiny_config


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"position_style": "learned"}, "position_style='learned' is not one of ('fairseq', 'absolute', 'rotary')"),
        ({"share_layers": "some"}, "share_layers='some' is not one of ('none', 'all', 'ffn', 'attention')"),
        (
            {"classifier_pooling": "max", "normed_heads": True},
            "classifier_pooling='max' is not one of ('cls', 'mean')",
        ),
        ({"embedding_size": 0}, "embedding_size must be positive or None, got 0"),
        ({"type_vocab_size": -1}, "type_vocab_size must be >= 0, got -1"),
        ({"local_attention": 1}, "local_attention must be at least 2 tokens wide or None, got 1"),
        ({"global_attn_every_n_layers": 0}, "global_attn_every_n_layers must be positive, got 0"),
        ({"classifier_pooling": "mean"}, "classifier_pooling='mean' needs normed_heads (ModernBERT's heads)"),
        (
            {"first_layer_attention_norm": False},
            "first_layer_attention_norm=False needs pre-LN layers (encoder_normalize_before)",
        ),
        (
            {"position_style": "rotary", "encoder_embed_dim": 36, "encoder_ffn_embed_dim": 72},
            "rotary positions need an even head size, got 9",
        ),
    ],
)
def test_each_refusal_names_the_option_and_its_value(overrides, message):
    with pytest.raises(ValueError, match="^" + re.escape(message) + "$"):
        tiny_config(**overrides)


def test_the_edges_of_each_range_are_accepted():
    assert tiny_config(embedding_size=1).embed_dim == 1
    assert tiny_config(type_vocab_size=0).type_vocab_size == 0
    assert tiny_config(local_attention=2, global_attn_every_n_layers=3).is_local_layer(1)
    assert tiny_config(local_attention=4, global_attn_every_n_layers=1).is_local_layer(1) is False
    # An odd head size is a rotary model's problem only.
    assert tiny_config(encoder_embed_dim=36, encoder_ffn_embed_dim=72).head_dim == 9
    assert tiny_config(first_layer_attention_norm=False, encoder_normalize_before=True).encoder_normalize_before
