"""How a static table is stored on disk: float32, float16 or int8, and optionally clustered.

A table is held in memory as float32 whatever its storage; the storage decides only the size of
the saved files (and what a load decodes):

- ``"float32"``: the rows as they are (the format every earlier contextembed wrote).
- ``"float16"``: each value rounded to half precision (half the size; cosine to float32 > 0.9999
  for tables of ordinary range).
- ``"int8"``: ``value = code * scale`` with ``code`` in -127..127 and one float32 ``scale`` per
  vector (``scale="vector"``: ``max |row| / 127``) or per dimension (``scale="dimension"``:
  ``max |column| / 127``; better when columns differ in range, as after PCA). A row or column of
  zeros gets scale 1.
- ``clusters=k``: the rows' directions (each row over its length) are clustered by k-means
  (scikit-learn's ``KMeans``, 50 rounds from random centres; ``MiniBatchKMeans`` above
  :data:`MINIBATCH_ROWS` rows), and each row stores the index of its centroid and its own length:
  ``row = length * unit(centroid)``. As in model2vec's ``vocabulary_quantization``, the lengths
  (which hold the SIF weights) survive the clustering. The unit centroids are stored at the chosen
  precision. A table whose directions take at most ``k`` distinct values (to 1e-5; one loaded from
  a clustered file) keeps them, so saving a loaded table again gives the same table.
- ``exact_columns=m`` (with ``clusters``): the ``m`` columns of largest variance (a PCA'd table's
  first ``m``) are kept for every row at the chosen precision, and only the other columns are
  clustered as above. Words that share a centroid still differ where the table varies most: on
  MiniLM's vocabulary table, 4,096 clusters keep 0.735 SST-2 accuracy alone and 0.762 with 32
  exact columns, against 0.778 unclustered (docs/speed.md).

The tensors of one table are ``vectors`` (``(rows, width)``, or ``(k, width - m)`` centroids),
``scales`` (int8: ``(rows or k,)`` or ``(width - m,)`` float32), and for a clustered table
``assignment`` (``(rows,)`` int32) and ``lengths`` (``(rows,)`` float32), and with exact columns
``columns`` (``(m,)`` int32, increasing), ``exact`` (``(rows, m)``) and, for int8, ``exact_scales``
(per vector or dimension, as ``scales``). :func:`decode` checks every one of them (dtype, shape,
finite positive scales, finite non-negative lengths, indices in range) and names the file in its
errors.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Literal, Optional

import numpy as np

from ...errors import ModelFormatError
from ..._inputs.options import check_choice
from ...pooling._layers import as_output_dtype

StoragePrecision = Literal["float32", "float16", "int8"]
Int8Scale = Literal["vector", "dimension"]

#: tables with more rows are clustered by MiniBatchKMeans (KMeans takes about 30 s for 24k x 384
#: rows into 4,096 clusters on 2 cores, and grows with rows times clusters)
MINIBATCH_ROWS = 100_000
#: rounds of KMeans (it stops earlier when the assignment settles)
KMEANS_ROUNDS = 50
#: the largest int8 code; -127..127 keeps the range symmetric
INT8_MAX = 127
_DTYPES = {"float32": np.float32, "float16": np.float16, "int8": np.int8}


@dataclass(frozen=True)
class TableStorage:
    """How a table's vectors are written (see the module docstring).

    Parameters
    ----------
    precision : {"float32", "float16", "int8"}
        How the table's values are stored on disk (they are float32 once loaded). Sizes and the
        quality each keeps, and which to choose: ``docs/choosing.md`` and ``docs/speed.md``.
    scale : {"vector", "dimension"}
        Where int8's scales are taken; ignored (and recorded as ``None``) for the float precisions.
    clusters : int, optional
        Store ``clusters`` centroids and an index per row instead of every row.
    exact_columns : int, optional
        With ``clusters``: keep this many columns (those of largest variance) exactly, per row, and
        cluster the others. Less than the table's width.

    Raises
    ------
    ValueError
        For an unknown precision or scale, ``clusters`` that is not a positive int, or
        ``exact_columns`` that is not a positive int or comes without ``clusters``.
    """

    precision: StoragePrecision = "float32"
    scale: Optional[Int8Scale] = None
    clusters: Optional[int] = None
    exact_columns: Optional[int] = None

    def __post_init__(self) -> None:
        check_choice("precision", self.precision, StoragePrecision)
        if self.precision == "int8":
            object.__setattr__(self, "scale", check_choice("scale", self.scale or "vector", Int8Scale))
        elif self.scale is not None:
            raise ValueError(f"scale={self.scale!r} applies to precision 'int8' only, not {self.precision!r}: "
                             "leave it None")
        for name in ("clusters", "exact_columns"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, np.integer))
                                      or not 1 <= value <= 2**31 - 1):
                raise ValueError(f"{name} must be None or an int from 1 to 2**31 - 1, got {value!r}")
            if value is not None:
                object.__setattr__(self, name, int(value))
        if self.exact_columns is not None and self.clusters is None:
            raise ValueError(f"exact_columns={self.exact_columns} keeps columns beside the clusters: pass clusters too")

    @property
    def is_default(self) -> bool:
        """Whether this is plain float32 rows (the layout older contextembed versions read)."""
        return self.precision == "float32" and self.clusters is None

    def as_record(self) -> dict:
        """``{"precision", "scale", "clusters"}`` as plain JSON values, and ``"exact_columns"`` when
        set (so the records of tables without it read as they always did)."""
        record = asdict(self)
        if self.exact_columns is None:
            del record["exact_columns"]
        return record

    @classmethod
    def from_record(cls, record: object, path: str) -> "TableStorage":
        """The storage a saved options file names; ``ModelFormatError`` naming ``path`` if it is damaged."""
        keys = {"precision", "scale", "clusters"}
        if not isinstance(record, dict) or not keys <= set(record) <= keys | {"exact_columns"}:
            raise ModelFormatError(f'"storage" must be an object with keys precision, scale and clusters (and '
                                   f"exact_columns), got {record!r:.200}", path=path)
        try:
            storage = cls(**record)
        except ValueError as error:
            raise ModelFormatError(f'"storage": {error}', path=path) from None
        if storage.as_record() != record:  # e.g. int8 without a scale: written by nothing we know
            raise ModelFormatError(f'"storage" {record!r} is not as contextembed writes it', path=path)
        return storage


def encode(vectors: np.ndarray, storage: TableStorage,
           where: Callable[[int], str] = "row {}".format) -> dict[str, np.ndarray]:
    """The tensors that store ``(rows, width)`` float32 ``vectors`` (see the module docstring).

    ``where(row)`` names a row of ``vectors`` in errors (``"row 3 (word 'cat') of the table"``).

    Raises
    ------
    ValueError
        If ``storage.clusters`` exceeds the number of rows, or (float16) naming the first row with a
        value beyond float16's range, which would be stored as an infinity. Nothing is returned then,
        so a caller that encodes before it writes writes nothing.
    """
    tensors: dict[str, np.ndarray] = {}
    if storage.clusters is not None and storage.clusters > len(vectors):
        raise ValueError(f"clusters={storage.clusters} exceeds the table's {len(vectors)} rows: pass at most "
                         f"{len(vectors)}")
    if storage.exact_columns is not None and storage.exact_columns >= vectors.shape[1]:
        raise ValueError(f"exact_columns={storage.exact_columns} leaves none of the table's {vectors.shape[1]} columns "
                         f"to cluster: pass at most {vectors.shape[1] - 1}")
    if storage.exact_columns is not None:
        # (m,) the columns of largest variance, increasing; (rows, m) their values; the rest is clustered
        columns = np.sort(np.argsort(-vectors.var(axis=0), kind="stable")[: storage.exact_columns]).astype(np.int32)
        tensors["columns"] = columns
        tensors.update(_stored(vectors[:, columns], storage, "exact", where))
        vectors = np.delete(vectors, columns, axis=1)
    if storage.clusters is not None:
        vectors, tensors["assignment"], tensors["lengths"] = _cluster(vectors, storage.clusters)
        where = "centroid {}".format  # unit vectors: always within float16's range
    tensors.update(_stored(vectors, storage, "vectors", where))
    return tensors


def _stored(vectors: np.ndarray, storage: TableStorage, name: str,
            where: Callable[[int], str]) -> dict[str, np.ndarray]:
    """``{name: values}`` at the storage's precision, with ``{prefix}scales`` for int8 (``scales``
    for ``vectors``, ``exact_scales`` for ``exact``); float16 values checked finite once rounded."""
    if storage.precision == "float16":
        fix = "save it with TableStorage('float32') or TableStorage('int8') (which scales any finite range)"
        return {name: as_output_dtype(vectors, "float16", where, fix)}
    if storage.precision != "int8":
        return {name: np.ascontiguousarray(vectors, dtype=_DTYPES[storage.precision])}
    codes, scales = _int8(vectors, storage.scale)
    # C order: safetensors writes the buffer as it lies (a column selection is in Fortran order)
    return {name: np.ascontiguousarray(codes), _scales_name(name): scales}


def _scales_name(name: str) -> str:
    return "scales" if name == "vectors" else f"{name}_scales"


def decode(tensors: dict[str, np.ndarray], storage: TableStorage, path: str) -> np.ndarray:
    """``(rows, width)`` float32 from the tensors :func:`encode` wrote, every one checked.

    Raises
    ------
    ModelFormatError
        Naming ``path``: for tensors missing or extra, of another dtype or shape, int8 scales that are
        not finite or not positive, or a cluster index outside the centroids.
    """
    int8 = {"scales"} if storage.precision == "int8" else set()
    expected = {"vectors"} | int8 | ({"assignment", "lengths"} if storage.clusters is not None else set()) \
        | ({"columns", "exact"} | {f"exact_{name}" for name in int8} if storage.exact_columns is not None else set())
    if set(tensors) != expected:
        raise ModelFormatError(f"a {_described(storage)} table has the tensors {sorted(expected)}, found "
                               f"{sorted(tensors)}", path=path)
    vectors = _decoded(tensors, "vectors", storage, path)
    if storage.clusters is not None and len(vectors) > storage.clusters:
        raise ModelFormatError(f"'vectors' holds {len(vectors)} centroids, more than the recorded clusters="
                               f"{storage.clusters}", path=path)
    if storage.clusters is not None:
        # (rows, width): each row's unit centroid times its length
        rows = _checked_assignment(tensors["assignment"], len(vectors), path)
        vectors = vectors[rows] * _checked_lengths(tensors["lengths"], len(rows), path)[:, None]
    if storage.exact_columns is not None:
        vectors = _with_exact_columns(vectors, tensors, storage, path)
    return vectors


def _decoded(tensors: dict[str, np.ndarray], name: str, storage: TableStorage, path: str) -> np.ndarray:
    """``(rows, width)`` float32 of the stored ``name`` (``"vectors"`` or ``"exact"``), checked."""
    values = tensors[name]
    if values.dtype != _DTYPES[storage.precision] or values.ndim != 2 or values.shape[1] < 1:
        raise ModelFormatError(f"expected a {storage.precision} (rows, width) tensor {name!r}, found "
                               f"{values.dtype} of shape {values.shape}", path=path)
    if storage.precision == "int8":
        values = _dequantize(values, tensors[_scales_name(name)], storage.scale, path, _scales_name(name))
    values = values.astype(np.float32)
    if not np.isfinite(values).all():
        row = int(np.argmin(np.isfinite(values).all(axis=1)))
        raise ModelFormatError(f"row {row} of the saved {'vectors' if name == 'vectors' else 'exact columns'} is "
                               "not finite", path=path)
    return values


def _with_exact_columns(clustered: np.ndarray, tensors: dict[str, np.ndarray], storage: TableStorage,
                        path: str) -> np.ndarray:
    """``(rows, width)``: the clustered ``(rows, width - m)`` columns with the ``m`` exact ones put back."""
    exact = _decoded(tensors, "exact", storage, path)
    columns = tensors["columns"]
    m, width = storage.exact_columns, clustered.shape[1] + storage.exact_columns
    if columns.dtype != np.int32 or columns.shape != (m,) or exact.shape != (len(clustered), m):
        raise ModelFormatError(f"expected exact_columns={m}: an ({m},) int32 tensor 'columns' and a ({len(clustered)}, "
                               f"{m}) tensor 'exact', found {columns.dtype} {columns.shape} and {exact.shape}", path=path)
    if (columns < 0).any() or (columns >= width).any() or (np.diff(columns) <= 0).any():
        raise ModelFormatError(f"'columns' must increase within the table's {width} columns, found "
                               f"{columns.tolist()!r:.200}: the file is damaged, save the table again", path=path)
    # (rows, width): the exact columns where they were, the clustered ones in the others, in order
    vectors = np.empty((len(clustered), width), dtype=np.float32)
    vectors[:, columns] = exact
    vectors[:, np.setdiff1d(np.arange(width), columns)] = clustered
    return vectors


def _described(storage: TableStorage) -> str:
    clusters = f"clusters={storage.clusters}" if storage.clusters is not None else None
    exact = f"exact_columns={storage.exact_columns}" if storage.exact_columns is not None else None
    options = ", ".join(option for option in (clusters, exact) if option)
    return storage.precision + (f" ({options})" if options else "")


def _int8(vectors: np.ndarray, scale: Int8Scale) -> tuple[np.ndarray, np.ndarray]:
    """``(rows, width)`` int8 codes and the float32 scales (``(rows,)`` or ``(width,)``)."""
    axis = 1 if scale == "vector" else 0
    # (rows,) or (width,): the largest magnitude along each vector or dimension
    peak = np.abs(vectors).max(axis=axis).astype(np.float32)
    scales = np.where(peak > 0, peak / INT8_MAX, 1).astype(np.float32)
    shaped = scales[:, None] if axis == 1 else scales[None, :]
    codes = np.clip(np.rint(vectors / shaped), -INT8_MAX, INT8_MAX).astype(np.int8)
    return codes, scales


def _dequantize(codes: np.ndarray, scales: np.ndarray, scale: Int8Scale, path: str,
                name: str = "scales") -> np.ndarray:
    length = codes.shape[0] if scale == "vector" else codes.shape[1]
    what = "int8 scale" if name == "scales" else f"int8 {name!r} scale"
    if scales.dtype != np.float32 or scales.shape != (length,):
        raise ModelFormatError(f"{what}s per {scale} must be float32 of shape ({length},), found "
                               f"{scales.dtype} of shape {scales.shape}", path=path)
    bad = np.flatnonzero(~(np.isfinite(scales) & (scales > 0)))
    if len(bad):
        raise ModelFormatError(f"{what} {int(bad[0])} (per {scale}) is {scales[bad[0]]}; scales must be finite "
                               "and positive: the file is damaged, save the table again", path=path)
    if (codes == -128).any():
        raise ModelFormatError("int8 codes hold -128, outside the -127..127 contextembed writes", path=path)
    return codes * (scales[:, None] if scale == "vector" else scales[None, :])


def _checked_assignment(assignment: np.ndarray, k: int, path: str) -> np.ndarray:
    if assignment.dtype != np.int32 or assignment.ndim != 1:
        raise ModelFormatError(f"expected a (rows,) int32 tensor 'assignment', found {assignment.dtype} of shape "
                               f"{assignment.shape}", path=path)
    bad = np.flatnonzero((assignment < 0) | (assignment >= k))
    if len(bad):
        raise ModelFormatError(f"row {int(bad[0])} names centroid {int(assignment[bad[0]])}, outside the {k} stored "
                               "centroids: the file is damaged, save the table again", path=path)
    return assignment


def _checked_lengths(lengths: np.ndarray, rows: int, path: str) -> np.ndarray:
    if lengths.dtype != np.float32 or lengths.shape != (rows,):
        raise ModelFormatError(f"expected a ({rows},) float32 tensor 'lengths', found {lengths.dtype} of shape "
                               f"{lengths.shape}", path=path)
    bad = np.flatnonzero(~(np.isfinite(lengths) & (lengths >= 0)))
    if len(bad):
        raise ModelFormatError(f"row {int(bad[0])} has length {lengths[bad[0]]}; lengths must be finite and not "
                               "negative: the file is damaged, save the table again", path=path)
    return lengths


def _cluster(vectors: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(k', width)`` unit centroids (``k' <= k``) of the rows' directions, each row's ``(rows,)``
    int32 centroid index and its ``(rows,)`` float32 length."""
    # (rows,) and (rows, width): every row's length and direction (a zero row keeps a zero direction)
    lengths = np.linalg.norm(vectors, axis=1).astype(np.float32)
    directions = vectors / np.where(lengths > 0, lengths, 1)[:, None]
    distinct, inverse = np.unique(np.round(directions, 5), axis=0, return_inverse=True)
    if len(distinct) <= k:  # at most k directions already (a clustered table loaded back): kept
        centroids, labels = distinct, inverse.reshape(-1)
    else:
        from sklearn.cluster import KMeans, MiniBatchKMeans

        # random starts, as model2vec's: k-means++ costs minutes for thousands of clusters
        if len(vectors) > MINIBATCH_ROWS:
            model = MiniBatchKMeans(n_clusters=k, random_state=0, n_init=1, init="random", batch_size=4096,
                                    max_iter=KMEANS_ROUNDS)
        else:
            model = KMeans(n_clusters=k, random_state=0, n_init=1, init="random", max_iter=KMEANS_ROUNDS)
        labels = model.fit_predict(directions)
        centroids = model.cluster_centers_
    norms = np.linalg.norm(centroids, axis=1, keepdims=True)
    units = centroids / np.where(norms > 0, norms, 1)
    return units.astype(np.float32), labels.astype(np.int32), lengths


__all__ = ["Int8Scale", "StoragePrecision", "TableStorage", "decode", "encode"]
