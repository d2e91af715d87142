""":class:`EmbedSettings`: what an output of :func:`~contextembed.io.embed_file` is made with, as one
frozen value, checked once where it is built.

The options that shape the features (``level`` and the options whose default it sets, ``context``,
``doc_sep``), those of the file (``input_format``, ``dtype``, ``chunk_sentences``) and how the
encoder runs (an :class:`~contextembed.encoders._registry.EncoderRef`: spec, device, precision,
backend) travel together from the entry point that builds them (``embed_file``, ``embed_corpus``,
an engine's actor, ``BatchEmbedder``) down to the writer and the provenance record, instead of as
loose keywords. Building one checks every value (an error names the argument, what was given and
what is accepted) and resolves the defaults of ``level``
(:data:`contextembed.extraction.LEVEL_DEFAULTS`); what needs the loaded encoder (layer indexes, the
encoder's own layers and combine at word level, ``context`` against its input size) or the input
file (its format, where ``input_format`` is ``None``) is resolved later, where they are.

Below :mod:`contextembed.io._pipeline` and :mod:`contextembed.io._jobs`, which import it (and
:mod:`contextembed.io._records`, whose ``output_fields`` takes one); it imports none of them.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Optional, get_args

import numpy as np

from .._inputs.documents import check_context_value
from .._inputs.options import check_choice
from .._runtime.backends import check_backend
from .._runtime.devices import check_device, check_precision
from ..encoders._registry import EncoderRef
from ..extraction import LEVELS, Level, level_options
from ..pooling import LayerSpec, check_combine, check_subword_pooling, check_text_pooling
from ..pooling._layers import OutputDtype, check_layer_spec
from ..tokenizers import TOKENIZERS
from .readers import DocSep, check_input_format

OUTPUT_DTYPES: tuple[str, ...] = get_args(OutputDtype)

#: the options of :func:`embed_file` whose default depends on ``level`` (``None``: that default)
LEVEL_OPTIONS = ("tokenizer", "layers", "combine", "subword_pooling", "text_pooling", "normalize")
#: those that shape text vectors only
TEXT_OPTIONS = ("text_pooling", "normalize")
#: the keywords of :func:`embed_file` that :class:`EmbedSettings` holds beside its encoder reference
OPTION_NAMES = ("input_format", "tokenizer", "layers", "combine", "subword_pooling", "level", "text_pooling",
                "normalize", "dtype", "context", "doc_sep", "chunk_sentences")
#: the keywords that name how the encoder runs: they make the settings' :class:`EncoderRef`
ENCODER_KEYWORDS = ("device", "precision", "backend")


@dataclass(frozen=True)
class EmbedSettings:
    """What an output is made with: the options of :func:`~contextembed.io.embed_file` and the encoder.

    Frozen and hashable; built once, at the entry point, and passed down as it is. Every value is
    checked at construction, and the options left ``None`` that ``level`` sets take its defaults
    there: at text level all of them (:data:`contextembed.pooling.TEXT_DEFAULTS`), at word level
    ``tokenizer`` and ``subword_pooling`` (``layers`` and ``combine`` stay ``None``, the loaded
    encoder's own; the text options stay ``None``: they do not apply). Two settings that make the
    same output compare equal.

    Attributes
    ----------
    encoder_ref : EncoderRef
        The encoder to load and how it runs (``spec``, ``device``, ``precision``, ``backend``,
        ``batch_tokens``); an encoder passed in loaded is used as it is.
    input_format : str or None
        ``None``: each input's format is told from its extension.
    tokenizer, layers, combine, subword_pooling, text_pooling, normalize
        As :func:`~contextembed.io.embed_file` takes them; a sequence of layers is held as a tuple.
    level : {"word", "text"}
    dtype : {"float32", "float16"}
    context : int
        Pieces of document context on each side (word level); checked against the encoder when it
        is loaded.
    doc_sep : {"none", "blank"}
    chunk_sentences : int

    Raises
    ------
    ValueError
        A value that is not one of the accepted ones (the message names the argument, the value and
        the choices), a text option at word level, ``doc_sep`` without ``context``.
    TypeError
        ``normalize`` that is not a bool, ``context`` that is not an int, ``layers`` that is not a
        sequence.
    """

    encoder_ref: EncoderRef
    input_format: Optional[str] = None
    tokenizer: Optional[str] = None
    layers: Optional[LayerSpec] = None
    combine: Optional[str] = None
    subword_pooling: Optional[str] = None
    level: Level = "word"
    text_pooling: Optional[str] = None
    normalize: Optional[bool] = None
    dtype: OutputDtype = "float32"
    context: int = 0
    doc_sep: DocSep = "none"
    chunk_sentences: int = 4096

    def __post_init__(self) -> None:
        given = _checked_given({name: getattr(self, name) for name in LEVEL_OPTIONS})
        chosen = _embed_options(self.level, given)
        _check_embed_options(self.level, chosen["tokenizer"], self.dtype, self.chunk_sentences)
        if self.level == "word":  # the text options shape text vectors only: none is held
            chosen.update(text_pooling=None, normalize=None)
        for name, value in chosen.items():
            object.__setattr__(self, name, value)
        _check_documents(self.input_format, self.context, self.doc_sep)
        _check_encoder_ref(self.encoder_ref)

    @classmethod
    def from_keywords(cls, spec, *, device="auto", precision: str = "auto", backend: str = "torch",
                      **options) -> "EmbedSettings":
        """The settings of ``embed_file(spec, ..., **options)``: ``device``, ``precision`` and
        ``backend`` make the encoder reference, the other keywords the rest.

        Raises
        ------
        TypeError
            For a keyword :func:`~contextembed.io.embed_file` does not take (naming it).
        """
        unknown = sorted(set(options) - set(OPTION_NAMES))
        if unknown:
            raise TypeError(f"unexpected keyword argument(s) {', '.join(map(repr, unknown))}: the settings of an "
                            f"output are {', '.join(OPTION_NAMES + ENCODER_KEYWORDS)}")
        return cls(EncoderRef(spec, device, precision, backend=backend), **options)

    def keywords(self) -> dict:
        """The settings as :func:`~contextembed.io.embed_file`'s keywords: what
        :meth:`from_keywords` builds them back from (with the reference's ``spec``; its
        ``batch_tokens``, which ``embed_file`` does not take, is left out)."""
        ref = self.encoder_ref
        runs = {"device": ref.device, "precision": ref.precision, "backend": ref.backend}
        return {**{name: getattr(self, name) for name in OPTION_NAMES}, **runs}

    def running(self, ref: EncoderRef) -> "EmbedSettings":
        """These settings with the encoder reference ``ref`` (one pinned to what ``"auto"`` chose)."""
        return dataclasses.replace(self, encoder_ref=ref)


def _checked_given(given: dict) -> dict:
    """``given`` once the options given (not ``None``) are checked against their choices, whatever
    the level (a sequence of layers as a tuple, ``normalize`` as a bool)."""
    given = dict(given)
    if given["layers"] is not None:
        given["layers"] = _held_layers(check_layer_spec(given["layers"]))
    checks = {"combine": check_combine, "subword_pooling": check_subword_pooling, "text_pooling": check_text_pooling}
    for name, check in checks.items():
        if given[name] is not None:
            check(given[name])
    if given["normalize"] is not None:
        if not isinstance(given["normalize"], (bool, np.bool_)):
            raise TypeError(f"normalize must be True or False, got {given['normalize']!r}")
        given["normalize"] = bool(given["normalize"])
    return given


def _held_layers(layers: LayerSpec) -> LayerSpec:
    """A layer spec in a hashable form: a sequence of indexes as a tuple of ints."""
    if isinstance(layers, (str, int, np.integer)):
        return int(layers) if isinstance(layers, np.integer) else layers
    return tuple(int(layer) for layer in layers)


def _embed_options(level: str, given: dict) -> dict:
    """The options of :data:`LEVEL_OPTIONS` with ``level``'s defaults where ``given`` has ``None``.

    Raises
    ------
    ValueError
        For an unknown ``level``, or a text option given at word level (it would be ignored).
    """
    if level not in LEVELS:
        raise ValueError(f"level={level!r} is not one of {', '.join(map(repr, LEVELS))}")
    given_text = [name for name in TEXT_OPTIONS if given[name] is not None]
    if level == "word" and given_text:
        name = given_text[0]
        raise ValueError(f"{name}={given[name]!r} (--{name.replace('_', '-')}) shapes text vectors: pass "
                         "level='text' (--level text), or leave it unset for word features")
    return level_options(level, **given)


def _check_embed_options(level: str, tokenizer: str, dtype: str, chunk_sentences: int) -> None:
    checks = {"level": (level, LEVELS), "tokenizer": (tokenizer, tuple(TOKENIZERS)), "dtype": (dtype, OUTPUT_DTYPES)}
    for name, (value, valid) in checks.items():
        if value not in valid:
            raise ValueError(f"{name}={value!r} is not one of {', '.join(map(repr, valid))}")
    if not isinstance(chunk_sentences, int) or chunk_sentences < 1:
        raise ValueError(f"chunk_sentences={chunk_sentences!r} must be a positive integer")


def _check_documents(input_format: Optional[str], context: int, doc_sep: str) -> None:
    """``doc_sep`` is a plain-text option that only context uses: never ignored silently. (Whether
    an input's format takes it is checked per input, once its format is known.)"""
    if input_format is not None:
        check_input_format(input_format)
    check_context_value(context)
    check_choice("doc_sep", doc_sep, DocSep)
    if doc_sep != "none" and not context:
        raise ValueError(f"doc_sep={doc_sep!r} (--doc-sep) sets the documents that context reaches across; it does "
                         "nothing without context: pass context=N (--context N) too, or leave it unset")


def _check_encoder_ref(ref: EncoderRef) -> None:
    """The form of how the encoder runs (what each family accepts is checked when it loads)."""
    check_device(ref.device)
    check_precision(ref.precision)
    check_backend(ref.backend)


__all__ = ["ENCODER_KEYWORDS", "LEVEL_OPTIONS", "OPTION_NAMES", "OUTPUT_DTYPES", "TEXT_OPTIONS", "EmbedSettings"]
