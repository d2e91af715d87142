"""Features as Arrow columns (the Parquet layout), and reading them back as ``contextembed embed`` arrays.

Parquet layout of the ``features`` column:

- word level: ``list<fixed_size_list<float32, dim>>``: per row its ``(tokens, dim)`` matrix, one
  inner list per token (an empty row is an empty list);
- text level: ``fixed_size_list<float32, dim>``: per row its ``(dim,)`` vector.

Both read in pandas as nested lists and in pyarrow without copies;
:func:`read_parquet_features` turns a directory of shards into the arrays ``contextembed embed``
writes (word level: ``features`` with one row per token and ``lengths``; text level: one row per
text), shard after shard in file-name order, which is the input order for datasets written with
order preserved (see :func:`contextembed.engines.ray.write_parquet`).
"""

from __future__ import annotations

import os

import numpy as np

FEATURES = "features"


def _pyarrow():
    try:
        import pyarrow
    except ImportError:
        from ..errors import missing_extra

        raise missing_extra("pyarrow", "models", "Arrow and Parquet features") from None
    return pyarrow


def is_table(batch) -> bool:
    """Whether ``batch`` is a ``pyarrow.Table`` (without importing pyarrow when it is not loaded)."""
    module = type(batch).__module__
    return module.startswith("pyarrow") and type(batch).__name__ == "Table"


def feature_array(rows: list[np.ndarray], level: str, dim: int):
    """``rows`` (``(tokens, dim)`` or ``(dim,)`` float32 each) as one Arrow array of the layout above."""
    pa = _pyarrow()
    flat = np.concatenate([np.asarray(r, np.float32).reshape(-1) for r in rows]) if rows else np.zeros(0, np.float32)
    vectors = pa.FixedSizeListArray.from_arrays(pa.array(flat, pa.float32()), dim)
    if level == "text":
        return vectors
    offsets = np.zeros(len(rows) + 1, dtype=np.int32)
    np.cumsum([len(r) for r in rows], out=offsets[1:])
    return pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), vectors)


def with_features(table, rows: list[np.ndarray], level: str, dim: int, name: str = FEATURES):
    """``table`` with the column ``name`` (replaced if present) holding ``rows``."""
    column = feature_array(rows, level, dim)
    if name in table.column_names:
        table = table.drop_columns([name])
    return table.append_column(name, column)


def feature_width(column_type) -> int:
    """``dim`` of a ``features`` column type (either layout)."""
    pa = _pyarrow()
    if pa.types.is_fixed_size_list(column_type):
        return column_type.list_size
    return column_type.value_type.list_size


def column_arrays(column) -> tuple[np.ndarray, np.ndarray]:
    """A ``features`` column (any of the layouts) -> ``(rows, dim)`` float32 and per-row lengths.

    Text level gives one row per input row (lengths all 1).
    """
    pa = _pyarrow()
    chunks = column.chunks if isinstance(column, pa.ChunkedArray) else [column]
    features, lengths = [], []
    for chunk in chunks:
        if pa.types.is_fixed_size_list(chunk.type):
            dim = chunk.type.list_size
            features.append(chunk.flatten().to_numpy(zero_copy_only=False).reshape(-1, dim))
            lengths.append(np.ones(len(chunk), dtype=np.int64))
        else:
            dim = chunk.type.value_type.list_size
            features.append(chunk.flatten().flatten().to_numpy(zero_copy_only=False).reshape(-1, dim))
            lengths.append(np.diff(chunk.offsets.to_numpy()).astype(np.int64))
    if not features:
        return np.zeros((0, 0), np.float32), np.zeros(0, np.int64)
    return np.concatenate(features).astype(np.float32, copy=False), np.concatenate(lengths)


def parquet_files(directory) -> list[str]:
    """The ``.parquet`` files of ``directory`` in name order (hidden and partial files skipped)."""
    directory = os.fspath(directory)
    names = sorted(n for n in os.listdir(directory) if n.endswith(".parquet") and not n.startswith("."))
    return [os.path.join(directory, n) for n in names]


def read_parquet_features(directory, *, column: str = FEATURES) -> dict:
    """Read a directory of Parquet shards back as ``{"features": (rows, dim), "lengths": (n,)}``.

    The layout of ``contextembed embed``'s ``.npz``: word level, one feature row per token and the
    tokens of each input row in ``lengths``; text level, one feature row per input row (``lengths``
    all 1).
    """
    import pyarrow.parquet as pq

    features, lengths = [], []
    for path in parquet_files(directory):
        f, n = column_arrays(pq.read_table(path, columns=[column]).column(column))
        if len(n):
            features.append(f)
            lengths.append(n)
    if not features:
        return {"features": np.zeros((0, 0), np.float32), "lengths": np.zeros(0, np.int64)}
    return {"features": np.concatenate(features), "lengths": np.concatenate(lengths)}


__all__ = ["column_arrays", "feature_array", "is_table", "parquet_files", "read_parquet_features", "with_features"]
