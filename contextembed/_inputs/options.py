"""Options are listed once: each is a ``Literal`` type in the module that owns it, whose
``typing.get_args`` are its valid values, and one function there checks it with :func:`check_choice`.

Where each option is defined:

=====================  ==================================================================
option                 definition (type and check)
=====================  ==================================================================
``layers``             :data:`contextembed.pooling._layers.LayerSpec`, ``check_layer_spec``
                       (form) and ``resolve_layers`` (against an encoder)
``combine``            :data:`contextembed.pooling._layers.Combine`, ``check_combine``
``tensor_combine``     :data:`contextembed.pooling._layers.FixedCombine`, ``check_fixed_combine``
``layer_norm``,        ``check_mix_options`` in :mod:`contextembed.pooling._layers`
``layer_dropout``
``subword_pooling``    :data:`contextembed.pooling._subword.SubwordPooling`, ``check_subword_pooling``
``text_pooling``       :data:`contextembed.pooling._text.TextPooling`, ``check_text_pooling``;
                       with the encoder: ``check_text_options``
``precision``          :data:`contextembed._runtime.precisions.Precision` (per family:
                       ``FAMILY_PRECISIONS``), ``contextembed._runtime.devices.check_precision``
``device``             :data:`contextembed._runtime.devices.Device`, ``check_device`` (form) and
                       ``resolve_device`` (present here)
``backend``            :data:`contextembed._runtime.backends.Backend` (per family: ``FAMILY_BACKENDS``),
                       ``contextembed._runtime.backends.check_backend``
``calibration``        ``contextembed._runtime.backends.check_calibration`` (where it can take effect)
``tokenizer``          :data:`contextembed.tokenizers.TOKENIZERS`, ``get_tokenizer``
``window``, ``stride`` types and ranges: ``OPTION_BOUNDS`` of
``batch_tokens``,      :mod:`contextembed.encoders.transformer` (``batch_words``: of
``pad_multiple``,      :mod:`contextembed.encoders._elmo.encoder`), through
``max_batch_size``,    ``contextembed._inputs.bounds.check_values``; against the model:
``chunk_size``,        ``contextembed._inputs.alignment.check_window``; an option of another family
``batch_words``        an error in ``contextembed.encoders._loading``
``format``,            :data:`contextembed.encoders._static.files.StaticFormat` and ``UnicodeErrors``,
``unicode_errors``     checked by ``read_vectors``
``oov``, ``lowercase`` :data:`contextembed.encoders._static.vectors.OovVector`, ``check_lookup``
``engine``             :data:`contextembed.corpus.Engine`, ``runner`` (dispatch through ``RUNNERS``)
``output_format``      :data:`contextembed.io._jobs.OutputFormat`, checked by ``plan``
``context``            ``contextembed._inputs.documents.check_context_value`` (form), ``check_context``
                       (against the encoder)
``doc_sep``            :data:`contextembed.io.readers.DocSep`, checked by ``read_documents`` and ``EmbedSettings``
                       (:mod:`contextembed.io._settings`: every option of ``embed_file``, once)
``dtype`` (output)     :data:`contextembed.pooling._layers.OutputDtype`, ``check_output_dtype``
                       (the estimators': in ``fit`` and where features are returned)
=====================  ==================================================================
"""

from __future__ import annotations

from typing import Any, get_args


def check_choice(name: str, value: Any, options: Any) -> Any:
    """Return ``value`` if it is one of ``typing.get_args(options)``; else ``ValueError`` listing them.

    Parameters
    ----------
    name : str
        The option's name as the user wrote it (``"combine"``, ``"subword_pooling"``).
    value
        What was given.
    options : typing.Literal
        The option's type.
    """
    choices = get_args(options)
    if isinstance(value, str) and value in choices:
        return value
    raise ValueError(f"{name}={value!r} is not one of {', '.join(map(repr, choices))}")


__all__ = ["check_choice"]
