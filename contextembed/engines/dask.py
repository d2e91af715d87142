"""Dask: embed a Dask bag or dataframe of texts or token lists, partition by partition.

``pip install "contextembed[dask]"``. The task function is a
:class:`~contextembed.engines.BatchEmbedder`, whose pickle holds the spec and options (or a fitted
estimator); each worker process loads the encoder on its first task and keeps it in the
process-wide registry (:func:`contextembed.encoders._registry.get_encoder`), so later tasks on that
worker reuse it::

    import dask.bag as db
    from contextembed.engines.dask import embed_bag

    bag = db.read_text("corpus/*.txt").map(str.split)
    vectors = embed_bag(bag, "minilm-l6", level="text")      # one (dim,) array per line

Fitted estimators also work as they are under ``dask_ml.wrappers.ParallelPostFit`` (their pickle
holds a model reference). An estimator saved with ``embed_weights=True`` carries the model's
weights in its pickle: send it once per worker with ``client.scatter(embedder, broadcast=True)``
and pass the future here, instead of letting every task carry it (``docs/scale.md``).
Dask raises a worker's error on the client as it was raised (its class and message).
"""

from __future__ import annotations

from ._batch import FEATURES, BatchEmbedder


def _dask():
    try:
        import dask
        import dask.bag  # noqa: F401
    except ImportError:
        from ..errors import missing_extra

        raise missing_extra("dask", "dask", "contextembed.engines.dask") from None
    return dask


def embed_partition(rows, number, embedder: BatchEmbedder) -> list:
    """Bag partition ``number`` (an iterable of rows) -> one float32 array per row, in order.

    ``number`` is the partition's number, or a one-item list holding it (a partition of a bag of
    numbers); errors name the partition and the row in it.
    """
    number = number[0] if isinstance(number, (list, tuple)) else number
    rows = list(rows)
    return embedder.embed_rows(rows, [f"partition {number}, row {i}" for i in range(len(rows))])


def embed_bag(bag, source, **options):
    """A lazy bag of features: per row a ``(tokens, dim)`` array (word level) or ``(dim,)`` vector.

    Parameters
    ----------
    bag : dask.bag.Bag
        Token lists or texts.
    source : str, path, fitted TokenEmbedder/TextEmbedder, BatchEmbedder, or a Future of one
        A future (``client.scatter(embedder, broadcast=True)``) is resolved once per worker.
    **options
        As in :class:`~contextembed.engines.BatchEmbedder` (not with a BatchEmbedder or a future).
    """
    dask = _dask()
    numbers = dask.bag.from_sequence(range(bag.npartitions), npartitions=bag.npartitions)
    return bag.map_partitions(embed_partition, numbers, _embedder(source, options))


def embed_dataframe(frame, source, **options):
    """A lazy dataframe: ``frame`` with a ``features`` column (an array per row).

    A malformed row is named by its index label, which Dask keeps global (e.g. the line number of
    ``dd.from_pandas``).
    """
    _dask()
    import numpy as np

    embedder = _embedder(source, options)
    if isinstance(embedder, BatchEmbedder):
        _check_token_column(frame, embedder.input_column(list(frame.columns)))
    meta = frame._meta.copy()
    meta[FEATURES] = np.empty(0, dtype=object)
    return frame.map_partitions(_call, embedder, meta=meta)


def _check_token_column(frame, column: str) -> None:
    """Dask's ``dataframe.convert-string`` turns a column of token lists into their text (``"['a', 'b']"``)."""
    import pandas as pd

    if column == "tokens" and pd.api.types.is_string_dtype(frame._meta[column].dtype) and \
            frame._meta[column].dtype != object:
        raise TypeError(
            f"the 'tokens' column has the string dtype {frame._meta[column].dtype}: Dask converted its token lists "
            "to text (the dataframe.convert-string option); build the dataframe inside "
            "dask.config.set({'dataframe.convert-string': False}), or pass the texts in a 'text' column"
        )


def _call(partition, embedder: BatchEmbedder):
    return embedder(partition)


def _embedder(source, options: dict):
    if isinstance(source, BatchEmbedder) or type(source).__name__ == "Future":
        if options:
            raise ValueError(f"{', '.join(options)} cannot be given with a built BatchEmbedder (or a future of one)")
        return source
    return BatchEmbedder(source, **options)


__all__ = ["embed_bag", "embed_dataframe", "embed_partition"]
