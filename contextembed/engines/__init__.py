"""Embedding corpora beyond one process with existing engines: Ray Data and Dask.

contextembed does not run a cluster of its own. :class:`BatchEmbedder` (engine-independent) maps a
batch of rows to features and loads the encoder once per worker process;
:mod:`contextembed.engines.ray` (``pip install "contextembed[ray]"``) and
:mod:`contextembed.engines.dask` (``pip install "contextembed[dask]"``) run it on those engines.
Nothing here is imported by the rest of the package (:data:`contextembed.corpus.RUNNERS` names the
Ray engine by its module path; the engines import only what lies below the corpus), and
Ray and Dask are imported only by their modules. See ``docs/scale.md``.
"""

from ._arrow import read_parquet_features
from ._batch import BatchEmbedder

__all__ = ["BatchEmbedder", "read_parquet_features"]
