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
- ``clusters=k``: the rows are replaced by the ``k`` centroids of a k-means of the table
  (scikit-learn's ``KMeans``, ``MiniBatchKMeans`` above :data:`MINIBATCH_ROWS` rows) and each row
  stores the index of its centroid (model2vec's ``vocabulary_quantization``); the centroids are
  stored at the chosen precision. A table with at most ``k`` distinct rows (one loaded from a
  clustered file) keeps its rows exactly, so saving a loaded table again changes nothing.

The tensors of one table are ``vectors`` (``(rows, width)``, or ``(k, width)`` centroids),
``scales`` (int8: ``(rows or k,)`` or ``(width,)`` float32) and ``assignment`` (clustered:
``(rows,)`` int32). :func:`decode` checks every one of them (dtype, shape, finite positive scales,
indices in range) and names the file in its errors.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Literal, Optional

import numpy as np

from ..errors import ModelFormatError
from ..options import check_choice

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
    if storage.clusters is not None:
        vectors, tensors["assignment"] = _cluster(vectors, storage.clusters)
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
        | ({"assignment"} if storage.clusters is not None else set())
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
        vectors = vectors[_checked_assignment(tensors["assignment"], len(vectors), path)]
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


def _cluster(vectors: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """``(k', width)`` centroids (``k' <= k``) and each row's ``(rows,)`` int32 centroid index."""
    if k > len(vectors):
        raise ValueError(f"clusters={k} exceeds the table's {len(vectors)} rows: pass at most {len(vectors)}")
    distinct, inverse = np.unique(vectors, axis=0, return_inverse=True)
    if len(distinct) <= k:  # already at most k vectors (a clustered table loaded back): kept exactly
        return distinct.astype(np.float32), inverse.reshape(-1).astype(np.int32)
    from sklearn.cluster import KMeans, MiniBatchKMeans

    if len(vectors) > MINIBATCH_ROWS:
        model = MiniBatchKMeans(n_clusters=k, random_state=0, n_init=3, batch_size=4096)
    else:
        model = KMeans(n_clusters=k, random_state=0, n_init=1)
    labels = model.fit_predict(vectors)
    return model.cluster_centers_.astype(np.float32), labels.astype(np.int32)


__all__ = ["Int8Scale", "StoragePrecision", "TableStorage", "decode", "encode"]
