"""A sentence-transformers directory's own sentence vector, as its files declare it.

A model saved by sentence-transformers carries, beside the Hugging Face files, how its sentence
vector is made: ``modules.json`` lists the modules run after the transformer (``Pooling``, then
optionally ``Normalize``), ``1_Pooling/config.json`` (the ``Pooling`` module's directory) says which
positions pool and how (``pooling_mode_mean_tokens``: the mean over every position of the input,
special tokens included), and ``sentence_bert_config.json`` gives ``max_seq_length`` (inputs are
truncated there) and ``do_lower_case`` (texts lowercased first).

:func:`read_sentence_pooling` reads them into a :class:`SentencePooling`, checked field by field:
a damaged file, a field of the wrong type, a module or pooling mode contextembed does not reproduce,
or a value that contradicts the model (another width, a length beyond its positions) is a
:class:`~contextembed.errors.FileFormatError` naming the file and the field.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Literal, Optional

from ..._runtime import json_io as _json
from ...errors import FileFormatError

#: the module types of ``modules.json``, by their last name
_TRANSFORMER, _POOLING, _NORMALIZE = "Transformer", "Pooling", "Normalize"
#: pooling modes of ``1_Pooling/config.json`` reproduced here, by their field
_MODES = {"pooling_mode_mean_tokens": "mean", "pooling_mode_cls_token": "cls", "pooling_mode_max_tokens": "max"}
#: pooling modes sentence-transformers has and contextembed does not reproduce
_OTHER_MODES = ("pooling_mode_mean_sqrt_len_tokens", "pooling_mode_weightedmean_tokens", "pooling_mode_lasttoken")
#: the largest configuration file read
_MAX_BYTES = 1 << 20

SentenceMode = Literal["mean", "cls", "max"]


@dataclass(frozen=True)
class SentencePooling:
    """How a sentence-transformers directory makes its sentence vector.

    Attributes
    ----------
    mode : {"mean", "cls", "max"}
        Over which positions of the last hidden state, and how: the mean or the maximum over every
        position of the input (special tokens included), or the first one.
    normalize : bool
        Whether the vector is scaled to unit length (a ``Normalize`` module).
    max_seq_length : int or None
        Pieces the model reads of a text, special tokens included (truncated beyond).
    lowercase : bool
        Whether texts are lowercased before they are tokenized (``do_lower_case``).
    """

    mode: SentenceMode
    normalize: bool
    max_seq_length: Optional[int]
    lowercase: bool


def read_sentence_pooling(directory: str, width: int, max_length: int) -> Optional[SentencePooling]:
    """The sentence pooling ``directory`` declares, ``None`` where it has no ``modules.json``.

    Parameters
    ----------
    directory : str
        The model directory.
    width : int
        The model's hidden size (the pooling's ``word_embedding_dimension`` must be it).
    max_length : int
        The most positions the model takes (``max_seq_length`` may not exceed it).

    Raises
    ------
    FileFormatError
        Naming the file and the field that is damaged, unsupported or contradicts the model.
    """
    modules_path = os.path.join(directory, "modules.json")
    if not os.path.isfile(modules_path):
        return None
    modules = _read(modules_path)
    if not isinstance(modules, list) or not modules:
        raise FileFormatError("expected a non-empty JSON list of modules", path=modules_path)
    kinds = [_module_kind(module, i, modules_path) for i, module in enumerate(modules)]
    if kinds[0][0] != _TRANSFORMER or kinds[0][1] not in ("", "."):
        raise FileFormatError("module 0 must be the sentence_transformers.models.Transformer of this directory "
                              f"(path ''), got {kinds[0][0]!r} at path {kinds[0][1]!r}", path=modules_path)
    names = [kind for kind, _ in kinds[1:]]
    if names not in ([_POOLING], [_POOLING, _NORMALIZE]):
        raise FileFormatError(f"modules {names} after the Transformer: contextembed reproduces a Pooling module, "
                              "optionally followed by Normalize, and nothing else", path=modules_path)
    mode = _pooling_mode(os.path.join(directory, kinds[1][1], "config.json"), width)
    max_seq_length, lowercase = _sentence_config(os.path.join(directory, "sentence_bert_config.json"), max_length)
    return SentencePooling(mode, len(names) == 2, max_seq_length, lowercase)


def _read(path: str):
    try:
        return _json.read(path, max_bytes=_MAX_BYTES)
    except _json.JSONError as error:
        raise FileFormatError(f"is not JSON that can be read: {error.reason}", path=path) from None
    except OSError as error:
        raise FileFormatError(f"cannot be read ({error.strerror})", path=path) from None


def _module_kind(module, index: int, path: str) -> tuple[str, str]:
    """``(type's last name, path)`` of entry ``index`` of ``modules.json``."""
    if not isinstance(module, dict) or not isinstance(module.get("type"), str) or not isinstance(module.get("path"), str):
        raise FileFormatError(f"module {index} must be an object with a string 'type' and 'path', got {module!r}",
                              path=path)
    kind, where = module["type"], module["path"]
    prefix = "sentence_transformers.models."
    if not kind.startswith(prefix):
        raise FileFormatError(f"module {index} has type {kind!r}, not a sentence_transformers.models module", path=path)
    if os.path.isabs(where) or ".." in where.replace("\\", "/").split("/"):
        raise FileFormatError(f"module {index} has path {where!r}, outside the model directory", path=path)
    return kind[len(prefix):], where


def _pooling_mode(path: str, width: int) -> SentenceMode:
    config = _read(path) if os.path.isfile(path) else None
    if not isinstance(config, dict):
        raise FileFormatError("the Pooling module's configuration is missing or not a JSON object", path=path)
    dimension = config.get("word_embedding_dimension")
    if type(dimension) is not int or dimension != width:
        raise FileFormatError(f"word_embedding_dimension is {dimension!r}, but the model's hidden size is {width}",
                              path=path)
    for field in (*_MODES, *_OTHER_MODES):
        if field in config and not isinstance(config[field], bool):
            raise FileFormatError(f"{field} is {config[field]!r}; expected true or false", path=path)
    other = [field for field in _OTHER_MODES if config.get(field)]
    if other:
        raise FileFormatError(f"{other[0]} is true: contextembed reproduces the mean, cls and max pooling modes only",
                              path=path)
    modes = [mode for field, mode in _MODES.items() if config.get(field)]
    if len(modes) != 1:
        raise FileFormatError(f"{len(modes)} pooling modes are true ({', '.join(f for f in _MODES if config.get(f)) or 'none'}); "
                              "contextembed reproduces exactly one", path=path)
    return modes[0]


def _sentence_config(path: str, max_length: int) -> tuple[Optional[int], bool]:
    if not os.path.isfile(path):
        return None, False
    config = _read(path)
    if not isinstance(config, dict):
        raise FileFormatError(f"expected a JSON object, got {type(config).__name__}", path=path)
    length = config.get("max_seq_length")
    if length is not None and (type(length) is not int or not 1 <= length <= max_length):
        raise FileFormatError(f"max_seq_length is {length!r}; expected a whole number from 1 to the model's "
                              f"{max_length} positions", path=path)
    lowercase = config.get("do_lower_case", False)
    if not isinstance(lowercase, bool):
        raise FileFormatError(f"do_lower_case is {lowercase!r}; expected true or false", path=path)
    return length, lowercase


__all__ = ["SentencePooling", "read_sentence_pooling"]
