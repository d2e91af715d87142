"""Plain-torch pooling: layers -> one vector, pieces -> words, words -> texts."""

from ._layers import (
    COMBINES,
    Combine,
    LayerPooling,
    LayerSpec,
    ScalarMix,
    check_combine,
    pool_layers_numpy,
    resolve_layers,
)
from ._subword import (
    SUBWORD_POOLINGS,
    SubwordPooling,
    check_subword_pooling,
    pool_subwords,
    pool_subwords_numpy,
    subword_output_width,
)
from ._text import (
    TEXT_DEFAULTS,
    TEXT_POOLINGS,
    TextDefaults,
    TextPooling,
    check_text_options,
    check_text_pooling,
    normalize_rows,
    pool_pieces_to_text,
    pool_text,
    pool_text_numpy,
)

__all__ = [
    "COMBINES",
    "Combine",
    "LayerPooling",
    "LayerSpec",
    "ScalarMix",
    "SUBWORD_POOLINGS",
    "SubwordPooling",
    "TEXT_DEFAULTS",
    "TEXT_POOLINGS",
    "TextDefaults",
    "TextPooling",
    "check_combine",
    "check_subword_pooling",
    "check_text_options",
    "check_text_pooling",
    "normalize_rows",
    "pool_layers_numpy",
    "pool_pieces_to_text",
    "pool_subwords",
    "pool_subwords_numpy",
    "pool_text",
    "pool_text_numpy",
    "resolve_layers",
    "subword_output_width",
]
