"""A Hugging Face model directory, checked before and after transformers reads it.

transformers is lenient where a feature library must not be: a directory without tokenizer files
gets a tokenizer of special tokens only (every word becomes ``[UNK]``), weights that do not cover
the configured architecture are randomly initialised with a log line, and corrupt files surface as
parser errors that name no file. Here:

- ``config.json`` must be valid JSON (the error names the line);
- at least one tokenizer vocabulary file must be present, ``tokenizer.json`` must parse, and the
  loaded tokenizer must hold more than its special tokens and fit the model's embedding matrix;
- weights must be present and readable (safetensors headers are checked to cover their files);
- after loading, the loading report of transformers (``output_loading_info=True``) must show no
  missing weight of the encoder and no left-over weight of the encoder's own modules. Weights of
  task heads in the checkpoint (``cls.*``, ``lm_head.*``: a pretraining checkpoint) are ignored, and
  so is a missing pooler, which contextembed never uses (it reads hidden states only).

Every failure is a :class:`~contextembed.errors.ModelFormatError` naming the file or directory.
Only local directories are ever passed to transformers, so nothing can reach the network.
"""

from __future__ import annotations

from contextlib import contextmanager
import os
from collections.abc import Iterable

import torch

from .._runtime import json_io as _json
from ..errors import ModelFormatError, ModelNotFoundError

#: files any of which lets a tokenizer be built (fast tokenizer, WordPiece, BPE, sentencepiece)
TOKENIZER_FILES = (
    "tokenizer.json",
    "vocab.txt",
    "vocab.json",
    "spiece.model",
    "sentencepiece.bpe.model",
    "tokenizer.model",
    "source.spm",
)
#: weight files transformers reads, in its order of preference
WEIGHT_FILES = (
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
)
#: modules of an encoder whose weights may be absent: contextembed never runs them
UNUSED_MODULES = ("pooler",)


def check_directory(path: str) -> None:
    """Check a model directory's files before loading; raise :class:`ModelFormatError` naming the file."""
    if not os.path.isdir(path):
        raise ModelNotFoundError(f"model directory {path} does not exist")
    read_config(path)
    _check_tokenizer_files(path)
    _check_weight_files(path)


#: the largest JSON file of a model read (a multilingual tokenizer.json is tens of MiB)
_MAX_JSON_BYTES = 256 << 20


def read_config(path: str) -> dict:
    """The model directory ``path``'s ``config.json``: a JSON object, else :class:`ModelFormatError`
    naming the file."""
    config = _read_json(os.path.join(path, "config.json"), required=True)
    if not isinstance(config, dict):
        raise ModelFormatError(f"holds a JSON {type(config).__name__}, expected an object of the model's settings",
                               path=os.path.join(path, "config.json"))
    return config


def _read_json(path: str, required: bool = False):
    if not os.path.isfile(path):
        if required:
            raise ModelFormatError(f"{os.path.basename(path)} is missing", path=os.path.dirname(path))
        return None
    try:  # NaN and Infinity are read: transformers writes them where a field holds one
        return _json.read(path, max_bytes=_MAX_JSON_BYTES, finite=False)
    except _json.JSONError as error:
        damaged = "; the file is truncated or corrupt" if error.line is not None else ""
        raise ModelFormatError(f"{error}{damaged}", path=path, line=error.line) from None


def _check_tokenizer_files(path: str) -> None:
    present = [name for name in TOKENIZER_FILES if os.path.isfile(os.path.join(path, name))]
    if not present:
        raise ModelFormatError(
            f"holds no tokenizer files (expected one of {', '.join(TOKENIZER_FILES)}); without them every "
            "word would become the unknown token. Save the tokenizer beside the model: "
            "tokenizer.save_pretrained(directory)",
            path=path,
        )
    _read_json(os.path.join(path, "tokenizer.json"))


def _check_weight_files(path: str) -> None:
    present = [name for name in WEIGHT_FILES if os.path.isfile(os.path.join(path, name))]
    if not present:
        raise ModelFormatError(
            f"holds no weights (expected one of {', '.join(WEIGHT_FILES)})", path=path
        )
    for name in present:
        if name.endswith(".index.json"):
            _check_shards(path, name)
        elif name.endswith(".safetensors"):
            _check_safetensors(os.path.join(path, name))


def _check_shards(path: str, index_name: str) -> None:
    index = _read_json(os.path.join(path, index_name))
    weight_map = index.get("weight_map") if isinstance(index, dict) else None
    shards = list(weight_map.values()) if isinstance(weight_map, dict) else []
    if not shards or not all(isinstance(shard, str) for shard in shards):
        raise ModelFormatError("has no 'weight_map' naming its shards", path=os.path.join(path, index_name))
    for shard in sorted(set(shards)):
        shard_path = os.path.join(path, shard)
        if not os.path.isfile(shard_path):
            raise ModelFormatError(f"names the shard {shard}, which is missing", path=os.path.join(path, index_name))
        if shard.endswith(".safetensors"):
            _check_safetensors(shard_path)


def _check_safetensors(path: str) -> None:
    """The header must parse and describe exactly the bytes in the file (no truncation)."""
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(path, framework="numpy") as handle:
            handle.keys()
    except (SafetensorError, OSError) as error:
        raise ModelFormatError(f"unreadable safetensors file ({error}); it is truncated or corrupt", path=path) from None


def load_tokenizer(path: str, options: dict):
    """``AutoTokenizer`` for a checked directory; errors name the directory."""
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True, **options)
    except (ImportError, ModelNotFoundError):
        raise
    except Exception as error:  # tokenizers/sentencepiece raise their own types
        raise ModelFormatError(f"the tokenizer cannot be loaded: {type(error).__name__}: {error}", path=path) from error
    return tokenizer


def load_model(path: str):
    """``AutoModel`` for a checked directory, refusing weights that do not cover the model."""
    from transformers import AutoModel

    try:
        # mismatched shapes are reported (and refused) by check_loading_report, with their names
        model, info = AutoModel.from_pretrained(
            path, local_files_only=True, output_loading_info=True, ignore_mismatched_sizes=True
        )
    except (ImportError, ModelNotFoundError):
        raise
    except Exception as error:
        raise ModelFormatError(f"the model cannot be loaded: {type(error).__name__}: {error}", path=path) from error
    check_loading_report(model, info, path)
    check_finite_weights(model, path)
    return model


def check_loading_report(model, info: dict, path: str) -> None:
    """Raise when the checkpoint leaves encoder weights uninitialised or holds encoder weights the
    configured model has no place for (e.g. ``num_hidden_layers`` edited in ``config.json``)."""
    modules = {name for name, _ in model.named_children()}
    prefix = getattr(model, "base_model_prefix", "")
    missing = [key for key in info.get("missing_keys", ()) if _module_of(key, prefix) not in UNUSED_MODULES]
    unexpected = [key for key in info.get("unexpected_keys", ()) if _module_of(key, prefix) in modules]
    problems = [f"{len(keys)} {what}: {_preview(keys)}" for what, keys in (
        ("weights of the model are missing from the checkpoint (they would be random)", missing),
        ("weights in the checkpoint have no place in the configured model", unexpected),
        ("weights have another shape than config.json gives", [_mismatch(k) for k in info.get("mismatched_keys", ())]),
        ("errors were reported", [str(m) for m in info.get("error_msgs", ())]),
    ) if keys]
    if problems:
        raise ModelFormatError(
            "the weights do not match config.json: " + "; ".join(problems)
            + ". Check that config.json and the weights come from the same model",
            path=path,
        )


#: the files a directory's weights may come from
_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth")


def check_finite_weights(model, path: str) -> None:
    """Refuse weights holding NaN or infinity: each float tensor summed in float64 (one pass, no
    bool copy; a sum of finite float32 values cannot overflow there). Paid once per weights file:
    the verdict is remembered with the files' identity and ``config.json``'s content
    (:mod:`contextembed._runtime.file_facts`), so a later process loading the same files skips it."""
    from .._runtime.file_facts import recall, remember
    from .._runtime.provenance import file_hash

    weights = sorted(os.path.join(path, name) for name in os.listdir(path) if name.endswith(_WEIGHT_SUFFIXES))
    config = os.path.join(path, "config.json")
    fact = "finite weights with config " + (file_hash(config) if os.path.isfile(config) else "-")
    if weights and all(recall(file, fact) is True for file in weights):
        return
    broken = [name for name, value in model.state_dict().items()
              if value.is_floating_point() and not bool(torch.isfinite(value.sum(dtype=torch.float64)))]
    if broken:
        raise ModelFormatError(f"the weights hold NaN or infinite values in {_preview(broken)}; they are corrupt", path=path)
    for file in weights:
        remember(file, fact, True)


def check_tokenizer_fits(tokenizer, model, path: str) -> None:
    """The tokenizer must hold real pieces and every id must have an embedding row."""
    n_special = len(set(tokenizer.all_special_ids))
    if len(tokenizer) <= n_special:
        raise ModelFormatError(
            f"the tokenizer holds only its {n_special} special tokens, so every word would become the unknown "
            "token; the vocabulary file is empty or unreadable",
            path=path,
        )
    embeddings = model.get_input_embeddings()
    rows = getattr(embeddings, "num_embeddings", None)
    if rows is not None and len(tokenizer) > rows:
        raise ModelFormatError(
            f"the tokenizer has {len(tokenizer)} pieces but the model's embedding matrix has {rows} rows; "
            "the tokenizer belongs to another model",
            path=path,
        )


def _mismatch(entry) -> str:
    """``(key, checkpoint shape, model shape)`` from transformers' report, as text."""
    if isinstance(entry, (tuple, list)) and len(entry) == 3:
        key, found, expected = entry
        return f"{key} {tuple(found)} in the checkpoint, {tuple(expected)} in the model"
    return str(entry)


def _module_of(key: str, prefix: str) -> str:
    if prefix and key.startswith(prefix + "."):
        key = key[len(prefix) + 1 :]
    return key.split(".", 1)[0]


def _preview(keys: Iterable[str], limit: int = 4) -> str:
    keys = sorted(keys)
    shown = ", ".join(keys[:limit])
    return shown + (f", ... ({len(keys) - limit} more)" if len(keys) > limit else "")


@contextmanager
def _quiet_transformers():
    """Silence transformers' loading progress bar and its logged loading report (which
    :func:`~contextembed.encoders._hf_files.check_loading_report` checks instead: a pretraining
    checkpoint's MLM/NSP heads are fine, missing encoder weights are an error), restoring the
    caller's settings afterwards."""
    from transformers.utils import logging as hf_logging

    verbosity, bar = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        hf_logging.set_verbosity(verbosity)
        if bar:
            hf_logging.enable_progress_bar()


#: model types with byte-level BPE tokenizers, which need ``add_prefix_space`` for pre-split words
_BYTE_LEVEL_TYPES = {"roberta", "gpt2", "longformer", "bart", "deberta", "camembert", "roberta-prelayernorm",
                     "data2vec-text", "luke", "mpnet", "ibert", "xlm-roberta"}


def _tokenizer_options(source: str) -> dict:
    """Byte-level BPE tokenizers need ``add_prefix_space`` to take pre-split words."""
    model_type = read_config(source).get("model_type")
    return {"add_prefix_space": True} if isinstance(model_type, str) and model_type in _BYTE_LEVEL_TYPES else {}
