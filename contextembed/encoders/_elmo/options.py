"""ELMo ``options.json``: validation and size presets.

The file has two sections (AllenNLP's original layout)::

    {"lstm": {"dim": 4096, "projection_dim": 512, "n_layers": 2, "cell_clip": 3, "proj_clip": 3,
              "use_skip_connections": true},
     "char_cnn": {"embedding": {"dim": 16}, "filters": [[1, 32], [2, 32], ...], "n_highway": 2,
                  "activation": "relu", "n_characters": 262, "max_characters_per_token": 50}}

Other keys (bilm-tf's training settings such as ``n_tokens_vocab``) are kept and written back on
save, but not used.
"""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Mapping
from typing import Any, Literal, Optional

from ..._runtime import json_io as _json
from ..._inputs.bounds import Bound, check_setting
from ...errors import ModelFormatError
from .characters import MAX_CHARACTERS, N_CHARACTERS

ElmoSize = Literal["tiny", "small", "medium", "original"]

#: the character CNN of every AllenNLP release: 2048 filters of widths 1..7
_RELEASE_FILTERS = [[1, 32], [2, 32], [3, 64], [4, 128], [5, 256], [6, 512], [7, 1024]]

#: (lstm dim, projection dim, highway layers, filters) of the released sizes, plus a tiny one for tests
SIZE_PRESETS: dict[str, dict[str, Any]] = {
    "tiny": {"dim": 64, "projection_dim": 16, "n_highway": 1, "filters": [[1, 8], [2, 8], [3, 16]]},
    "small": {"dim": 1024, "projection_dim": 128, "n_highway": 1, "filters": _RELEASE_FILTERS},
    "medium": {"dim": 2048, "projection_dim": 256, "n_highway": 1, "filters": _RELEASE_FILTERS},
    "original": {"dim": 4096, "projection_dim": 512, "n_highway": 2, "filters": _RELEASE_FILTERS},
}

#: every key the architecture needs, with the type it must have
REQUIRED_KEYS: dict[str, tuple[type, ...]] = {
    "lstm.dim": (int,),
    "lstm.projection_dim": (int,),
    "lstm.n_layers": (int,),
    "lstm.cell_clip": (int, float, type(None)),
    "lstm.proj_clip": (int, float, type(None)),
    "lstm.use_skip_connections": (bool,),
    "char_cnn.embedding.dim": (int,),
    "char_cnn.filters": (list,),
    "char_cnn.n_highway": (int,),
    "char_cnn.activation": (str,),
    "char_cnn.n_characters": (int,),
    "char_cnn.max_characters_per_token": (int,),
}

#: the largest float32: a clip beyond it is infinity in the LSTM's arithmetic
_FLOAT32_MAX = 3.4028234663852886e38
_WIDTH = 2**31 - 1
#: the range of every numeric key (:mod:`contextembed._inputs.bounds`: NaN and infinities are never in one)
OPTION_BOUNDS: dict[str, Bound] = {
    "lstm.dim": Bound(int, 1, _WIDTH),
    "lstm.projection_dim": Bound(int, 1, _WIDTH),
    "lstm.n_layers": Bound(int, 1, _WIDTH),
    "lstm.cell_clip": Bound(float, 0, _FLOAT32_MAX, optional=True, note="0 or null: no clipping"),
    "lstm.proj_clip": Bound(float, 0, _FLOAT32_MAX, optional=True, note="0 or null: no clipping"),
    "char_cnn.embedding.dim": Bound(int, 1, _WIDTH),
    "char_cnn.n_highway": Bound(int, 0, _WIDTH),
}

ACTIVATIONS = ("relu", "tanh")
#: the largest ``options.json`` read (a real one is under 1 KiB)
_MAX_OPTIONS_BYTES = 1 << 20


class ElmoFormatError(ModelFormatError):
    """An ELMo ``options.json`` or ``weights.hdf5`` does not match the expected layout."""


def elmo_options(
    size: ElmoSize = "small",
    *,
    n_layers: int = 2,
    cell_clip: Optional[float] = 3.0,
    proj_clip: Optional[float] = 3.0,
    activation: Literal["relu", "tanh"] = "relu",
    char_embedding_dim: int = 16,
    **overrides: Any,
) -> dict:
    """Build an options dict for one of the released ELMo sizes (or ``"tiny"`` for tests).

    Parameters
    ----------
    size : {"tiny", "small", "medium", "original"}
        ``small`` = 2x1024 LSTM, 128 projection, 2048 filters, 1 highway; ``medium`` = 2x2048, 256,
        1 highway; ``original`` = 2x4096, 512, 2 highway; ``tiny`` = 2x64, 16, 32 filters.
    n_layers, cell_clip, proj_clip, activation, char_embedding_dim
        The remaining architecture settings (defaults: those of the releases).
    **overrides
        Replace a preset value: ``dim``, ``projection_dim``, ``n_highway``, ``filters``.

    Returns
    -------
    dict
        A valid options dict (passes :func:`check_options`).
    """
    if size not in SIZE_PRESETS:
        raise ValueError(f"size={size!r} is not one of {', '.join(map(repr, SIZE_PRESETS))}")
    preset = {**SIZE_PRESETS[size]}
    unknown = set(overrides) - set(preset)
    if unknown:
        raise TypeError(f"unknown override(s) {sorted(unknown)}; expected some of {sorted(preset)}")
    preset.update(overrides)
    options = {
        "lstm": {
            "dim": preset["dim"],
            "projection_dim": preset["projection_dim"],
            "n_layers": n_layers,
            "cell_clip": cell_clip,
            "proj_clip": proj_clip,
            "use_skip_connections": True,
        },
        "char_cnn": {
            "embedding": {"dim": char_embedding_dim},
            "filters": copy.deepcopy(preset["filters"]),
            "n_highway": preset["n_highway"],
            "activation": activation,
            "n_characters": N_CHARACTERS,
            "max_characters_per_token": MAX_CHARACTERS,
        },
    }
    return check_options(options)


def read_options(path: str | os.PathLike) -> dict:
    """Read and validate an ``options.json`` (errors name the file)."""
    path = os.fspath(path)
    try:
        options = _json.read(path, max_bytes=_MAX_OPTIONS_BYTES)
    except _json.JSONError as error:
        raise ElmoFormatError(f"{path}: {error}") from None
    return check_options(options, source=path)


def write_options(options: Mapping, path: str | os.PathLike) -> None:
    """Write an options dict as ``options.json``."""
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(options, handle, indent=2)
        handle.write("\n")


def check_options(options: Mapping, source: str = "options") -> dict:
    """Validate an ELMo options dict; return a deep copy.

    Raises
    ------
    ElmoFormatError
        A missing key or a value of the wrong type (naming ``source`` and the dotted key), or a
        setting this implementation does not support (naming the value and the supported ones).
    """
    if not isinstance(options, Mapping):
        raise ElmoFormatError(f"{source}: expected a JSON object, got {type(options).__name__}")
    for key, types in REQUIRED_KEYS.items():
        value = _lookup(options, key, source)
        if not isinstance(value, types) or (bool not in types and isinstance(value, bool)):
            expected = " or ".join("null" if t is type(None) else t.__name__ for t in types)
            raise ElmoFormatError(f"{source}: key '{key}' must be {expected}, got {value!r}")
    for check in _SUPPORT_CHECKS:
        check(options, source)
    return copy.deepcopy(dict(options))


def _lookup(options: Mapping, dotted: str, source: str) -> Any:
    node: Any = options
    parts = dotted.split(".")
    for depth, part in enumerate(parts):
        if not isinstance(node, Mapping) or part not in node:
            where = ".".join(parts[:depth]) or "the top level"
            raise ElmoFormatError(
                f"{source}: missing key '{dotted}' (no '{part}' in {where}); an ELMo options file "
                f"needs {', '.join(REQUIRED_KEYS)}"
            )
        node = node[part]
    return node


def _check_skip(options: Mapping, source: str) -> None:
    if not options["lstm"]["use_skip_connections"]:
        raise ElmoFormatError(
            f"{source}: lstm.use_skip_connections=false is not supported; only biLMs with residual "
            "connections between LSTM layers (every released ELMo) can be loaded"
        )


def _check_numbers(options: Mapping, source: str) -> None:
    """Every numeric key in its range (:data:`OPTION_BOUNDS`): ``cell_clip=NaN`` made every LSTM
    layer's features NaN."""
    for key, bound in OPTION_BOUNDS.items():
        try:
            check_setting(key, _lookup(options, key, source), bound)
        except (TypeError, ValueError) as error:
            raise ElmoFormatError(f"{source}: {error}") from None


def _check_filters(options: Mapping, source: str) -> None:
    filters = options["char_cnn"]["filters"]
    if not filters:
        raise ElmoFormatError(f"{source}: char_cnn.filters is empty; expected [[width, n_filters], ...]")
    for i, pair in enumerate(filters):
        ok = (
            isinstance(pair, list) and len(pair) == 2
            and all(isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in pair)
        )
        if not ok or pair[0] > MAX_CHARACTERS:
            raise ElmoFormatError(
                f"{source}: char_cnn.filters[{i}] = {pair!r}; expected [width, n_filters] with "
                f"1 <= width <= {MAX_CHARACTERS} and n_filters >= 1"
            )


def _check_characters(options: Mapping, source: str) -> None:
    cnn = options["char_cnn"]
    if cnn["activation"] not in ACTIVATIONS:
        raise ElmoFormatError(
            f"{source}: char_cnn.activation={cnn['activation']!r} is not supported; expected one of "
            f"{', '.join(map(repr, ACTIVATIONS))}"
        )
    if cnn["n_characters"] != N_CHARACTERS:
        raise ElmoFormatError(
            f"{source}: char_cnn.n_characters={cnn['n_characters']} is not supported; expected "
            f"{N_CHARACTERS} (261 byte/marker ids + the padding id 0; bilm-tf training files say 261, "
            "set it to 262 for inference as bilm-tf does)"
        )
    if cnn["max_characters_per_token"] != MAX_CHARACTERS:
        raise ElmoFormatError(
            f"{source}: char_cnn.max_characters_per_token={cnn['max_characters_per_token']} is not "
            f"supported; expected {MAX_CHARACTERS}"
        )


def _check_bidirectional(options: Mapping, source: str) -> None:
    if options.get("bidirectional", True) is not True:
        raise ElmoFormatError(
            f"{source}: bidirectional={options['bidirectional']!r} is not supported; only "
            "bidirectional LMs (forward and backward LSTMs) can be loaded"
        )


_SUPPORT_CHECKS = (_check_skip, _check_numbers, _check_filters, _check_characters, _check_bidirectional)


def n_filters(options: Mapping) -> int:
    """Total number of character filters (the width of the highway layers)."""
    return sum(n for _, n in options["char_cnn"]["filters"])
