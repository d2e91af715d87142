"""Saving fitted estimators without pickle: ``skops.io`` with the types contextembed adds.

``skops.io.load`` refuses every type it does not trust by default; a fitted contextembed estimator
holds, besides scikit-learn's own and NumPy's types, only the ones listed in :data:`TRUSTED_TYPES`:
the estimator classes and two frozen dataclasses of plain fields (the encoder reference and the
model identity). Their state is plain data: the layer pooling is stored as NumPy arrays and
numbers (never a torch object), and embedded weights (``embed_weights=True``) as the bytes of the
files :meth:`contextembed.Encoder.save` writes (safetensors, HDF5, JSON), which are parsed, not
executed, when loaded. Loading checks every embedded file name (relative, no ``..``, no absolute,
drive or control-character names, bounded length and count, no collisions) before writing
anything, unpacks into a fresh temporary directory, and makes the files visible only once their
fingerprint and provenance record (the model the estimator was fitted with, the encoder family)
match; see :mod:`contextembed.sklearn._embedded`.

>>> import skops.io
>>> skops.io.dump(fitted, "embedder.skops")  # doctest: +SKIP
>>> skops.io.load("embedder.skops", trusted=TRUSTED_TYPES)  # doctest: +SKIP

A pipeline or grid search around them adds only scikit-learn types; a custom ``classifier``,
``tokenizer`` callable or ``cache=joblib.Memory(...)`` adds its own, which ``skops.io.get_untrusted_types``
lists for review before loading.
"""

#: the contextembed types a fitted estimator's skops file holds (pass to ``skops.io.load(trusted=...)``);
#: files written before the private modules were renamed name the same classes by their old paths
TRUSTED_TYPES: list[str] = [
    "contextembed.encoders._identity.ModelIdentity",
    "contextembed.encoders._registry.EncoderRef",
    "contextembed.sklearn._encoding.EncoderRef",  # its path in files saved before the registry moved
    "contextembed.sklearn._neural_tagger.BiLSTMCRFTagger",
    "contextembed.sklearn._pairs.TextPairEmbedder",
    "contextembed.sklearn._tagger.SequenceTagger",
    "contextembed.sklearn._text.TextEmbedder",
    "contextembed.sklearn._token.TokenEmbedder",
    # the same classes, as files saved by contextembed 0.1 name them
    "contextembed.encoders.identity.ModelIdentity",
    "contextembed.sklearn.neural_tagger.BiLSTMCRFTagger",
    "contextembed.sklearn.pairs.TextPairEmbedder",
    "contextembed.sklearn.tagger.SequenceTagger",
    "contextembed.sklearn.text.TextEmbedder",
    "contextembed.sklearn.token.TokenEmbedder",
]

__all__ = ["TRUSTED_TYPES"]
