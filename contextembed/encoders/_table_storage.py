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
  (scikit-learn's ``KMeans``, ``MiniBatchKMeans`` above :data:`MINIBATCH_ROWS` rows), and each row
  stores the index of its centroid and its own length: ``row = length * unit(centroid)``. As in
  model2vec's ``vocabulary_quantization``, the lengths (which hold the SIF weights) survive the
  clustering. The unit centroids are stored at the chosen precision. A table whose directions
  take at most ``k`` distinct values (to 1e-5; one loaded from a clustered file) keeps them, so
  saving a loaded table again gives the same table.

The tensors of one table are ``vectors`` (``(rows, width)``, or ``(k, width)`` centroids),
``scales`` (int8: ``(rows or k,)`` or ``(width,)`` float32), and for a clustered table
``assignment`` (``(rows,)`` int32) and ``lengths`` (``(rows,)`` float32). :func:`decode` checks
every one of them (dtype, shape, finite positive scales, finite non-negative lengths, indices in
range) and names the file in its errors.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Literal, Optional

import numpy as np

from ..errors import ModelFormatError
from .._options import check_choice

StoragePrecision = Literal["float32", "float16", "int8"]
Int8Scale = Literal["vector", "dimension"]

#: tables with more rows are clustered by MiniBatchKMeans (KMeans is slow on 30k x 384)
MINIBATCH_ROWS = 20_000
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

    Raises
    ------
    ValueError
        For an unknown precision or scale, or ``clusters`` that is not a positive int.
    """

    precision: StoragePrecision = "float32"
    scale: Optional[Int8Scale] = None
    clusters: Optional[int] = None

    def __post_init__(self) -> None:
        check_choice("precision", self.precision, StoragePrecision)
        if self.precision == "int8":
            object.__setattr__(self, "scale", check_choice("scale", self.scale or "vector", Int8Scale))
        elif self.scale is not None:
            raise ValueError(f"scale={self.scale!r} applies to precision 'int8' only, not {self.precision!r}: "
                             "leave it None")
        clusters = self.clusters
        if clusters is not None and (isinstance(clusters, bool) or not isinstance(clusters, (int, np.integer))
                                     or not 1 <= clusters <= 2**31 - 1):
            raise ValueError(f"clusters must be None or an int from 1 to 2**31 - 1, got {clusters!r}")
        if clusters is not None:
            object.__setattr__(self, "clusters", int(clusters))

    @property
    def is_default(self) -> bool:
        """Whether this is plain float32 rows (the layout older contextembed versions read)."""
        return self.precision == "float32" and self.clusters is None

    def as_record(self) -> dict:
        """``{"precision", "scale", "clusters"}`` as plain JSON values."""
        return asdict(self)

    @classmethod
    def from_record(cls, record: object, path: str) -> "TableStorage":
        """The storage a saved options file names; ``ModelFormatError`` naming ``path`` if it is damaged."""
        if not isinstance(record, dict) or set(record) != {"precision", "scale", "clusters"}:
            raise ModelFormatError(f'"storage" must be an object with keys precision, scale and clusters, got '
                                   f"{record!r:.200}", path=path)
        try:
            storage = cls(**record)
        except ValueError as error:
            raise ModelFormatError(f'"storage": {error}', path=path) from None
        if storage.as_record() != record:  # e.g. int8 without a scale: written by nothing we know
            raise ModelFormatError(f'"storage" {record!r} is not as contextembed writes it', path=path)
        return storage


def encode(vectors: np.ndarray, storage: TableStorage) -> dict[str, np.ndarray]:
    """The tensors that store ``(rows, width)`` float32 ``vectors`` (see the module docstring).

    Raises
    ------
    ValueError
        If ``storage.clusters`` exceeds the number of rows.
    """
    tensors: dict[str, np.ndarray] = {}
    if storage.clusters is not None and storage.clusters > len(vectors):
        raise ValueError(f"clusters={storage.clusters} exceeds the table's {len(vectors)} rows: pass at most "
                         f"{len(vectors)}")
    if storage.clusters is not None:
        vectors, tensors["assignment"], tensors["lengths"] = _cluster(vectors, storage.clusters)
    if storage.precision == "int8":
        tensors["vectors"], tensors["scales"] = _int8(vectors, storage.scale)
    else:
        tensors["vectors"] = np.ascontiguousarray(vectors, dtype=_DTYPES[storage.precision])
    return tensors


def decode(tensors: dict[str, np.ndarray], storage: TableStorage, path: str) -> np.ndarray:
    """``(rows, width)`` float32 from the tensors :func:`encode` wrote, every one checked.

    Raises
    ------
    ModelFormatError
        Naming ``path``: for tensors missing or extra, of another dtype or shape, int8 scales that are
        not finite or not positive, or a cluster index outside the centroids.
    """
    expected = {"vectors"} | ({"scales"} if storage.precision == "int8" else set()) \
        | ({"assignment", "lengths"} if storage.clusters is not None else set())
    if set(tensors) != expected:
        raise ModelFormatError(f"a {_described(storage)} table has the tensors {sorted(expected)}, found "
                               f"{sorted(tensors)}", path=path)
    vectors = tensors["vectors"]
    if vectors.dtype != _DTYPES[storage.precision] or vectors.ndim != 2 or vectors.shape[1] < 1:
        raise ModelFormatError(f"expected a {storage.precision} (rows, width) tensor 'vectors', found "
                               f"{vectors.dtype} of shape {vectors.shape}", path=path)
    if storage.clusters is not None and len(vectors) > storage.clusters:
        raise ModelFormatError(f"'vectors' holds {len(vectors)} centroids, more than the recorded clusters="
                               f"{storage.clusters}", path=path)
    if storage.precision == "int8":
        vectors = _dequantize(vectors, tensors["scales"], storage.scale, path)
    vectors = vectors.astype(np.float32)
    if not np.isfinite(vectors).all():
        row = int(np.argmin(np.isfinite(vectors).all(axis=1)))
        raise ModelFormatError(f"row {row} of the saved vectors is not finite", path=path)
    if storage.clusters is not None:
        # (rows, width): each row's unit centroid times its length
        rows = _checked_assignment(tensors["assignment"], len(vectors), path)
        vectors = vectors[rows] * _checked_lengths(tensors["lengths"], len(rows), path)[:, None]
    return vectors


def _described(storage: TableStorage) -> str:
    return storage.precision + (f" (clusters={storage.clusters})" if storage.clusters is not None else "")


def _int8(vectors: np.ndarray, scale: Int8Scale) -> tuple[np.ndarray, np.ndarray]:
    """``(rows, width)`` int8 codes and the float32 scales (``(rows,)`` or ``(width,)``)."""
    axis = 1 if scale == "vector" else 0
    # (rows,) or (width,): the largest magnitude along each vector or dimension
    peak = np.abs(vectors).max(axis=axis).astype(np.float32)
    scales = np.where(peak > 0, peak / INT8_MAX, 1).astype(np.float32)
    shaped = scales[:, None] if axis == 1 else scales[None, :]
    codes = np.clip(np.rint(vectors / shaped), -INT8_MAX, INT8_MAX).astype(np.int8)
    return codes, scales


def _dequantize(codes: np.ndarray, scales: np.ndarray, scale: Int8Scale, path: str) -> np.ndarray:
    length = codes.shape[0] if scale == "vector" else codes.shape[1]
    if scales.dtype != np.float32 or scales.shape != (length,):
        raise ModelFormatError(f"int8 scales per {scale} must be float32 of shape ({length},), found "
                               f"{scales.dtype} of shape {scales.shape}", path=path)
    bad = np.flatnonzero(~(np.isfinite(scales) & (scales > 0)))
    if len(bad):
        raise ModelFormatError(f"int8 scale {int(bad[0])} (per {scale}) is {scales[bad[0]]}; scales must be finite "
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

        if len(vectors) > MINIBATCH_ROWS:
            # random starts, as model2vec's: k-means++ costs minutes for thousands of clusters
            model = MiniBatchKMeans(n_clusters=k, random_state=0, n_init=1, init="random", batch_size=4096,
                                    max_iter=20)
        else:
            model = KMeans(n_clusters=k, random_state=0, n_init=1)
        labels = model.fit_predict(directions)
        centroids = model.cluster_centers_
    norms = np.linalg.norm(centroids, axis=1, keepdims=True)
    units = centroids / np.where(norms > 0, norms, 1)
    return units.astype(np.float32), labels.astype(np.int32), lengths


__all__ = ["Int8Scale", "StoragePrecision", "TableStorage", "decode", "encode"]
