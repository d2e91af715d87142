"""Static word vectors (word2vec, GloVe, fastText): the encoder (``vectors``), the vectors files it
reads and writes (``files``; each format's reader in ``text_files`` and ``binary_files``), its own
directory format (``directory``), the table of vectors in memory or mapped from disk (``tables``)
and fastText's character n-gram vectors (``subwords``)."""

from .vectors import OovVector, StaticVectors

__all__ = ["OovVector", "StaticVectors"]
