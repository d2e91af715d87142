"""The ``contextembed`` pipeline component: frozen encoder features for every spaCy token.

On ``nlp(text)`` / ``nlp.pipe(texts)`` it encodes each doc (one row per token), writes the default
pooled features to ``doc.tensor`` and installs user hooks so that ``token.vector`` and
``span.vector`` use them; ``doc.vector`` is the default text vector of the doc's tokens
(:data:`contextembed.pooling.TEXT_DEFAULTS`, what ``TextEmbedder()`` gives), computed in the same
pass, and ``similarity`` the cosine of these vectors. During a batch every listener gets the
layers it pools; the doc keeps all layers (``doc._.contextembed[name]``) only with
``store_layers=True``.

Saving and loading
------------------
``to_disk`` writes the component's directory whole, into a temporary directory beside it that is
swapped in only when complete (:func:`contextembed._runtime.files.atomic_directory`; ``nlp.to_disk``
calls it with ``path / name``): nothing from an earlier save into the same place survives (an
``encoder/`` left by an ``embed_weights=True`` save would otherwise be loaded again), and an
interrupted save leaves the previous one as it was. Its ``cfg`` holds a provenance record
(:mod:`contextembed._runtime.provenance`, artifact ``"spacy encoder component"``): whether weights are
embedded, the hash of every file of the embedded ``encoder/`` (names and contents), the model's
fingerprint and the options that shape the features (``subword_pooling``, ``window``,
``stride``, ``tensor_layers``, ``tensor_combine``; ``device``, ``precision`` and ``backend`` may
change when loading: the encoder is frozen, so its features are computed again on what runs now).
``config.cfg`` keeps the encoder block as saved, ``backend`` included.

``from_disk`` checks, before any encoder loads: the record against the component as configured
now (another ``subword_pooling``, ``window``, ``stride``, ``tensor_layers`` or ``tensor_combine``
in ``config.cfg`` or in the overrides given to ``spacy.load`` is a
:class:`~contextembed.errors.ProvenanceError`), an ``encoder/`` the record does not expect or a
missing one it does, an ``encoder/`` whose files differ from the record (edited, truncated,
swapped in from another save), and inside it any link, special file or meta ``subdir`` other than
``"model"`` (:class:`~contextembed.errors.ModelFormatError`). It writes nothing.
The component keeps its settings as configured: ``store_layers`` and ``embed_weights`` come from
``config.cfg`` and the overrides, never from ``cfg`` (an override ``embed_weights=true`` makes the
next save embed the weights).
``exclude=["encoder"]`` saves without the weights (the record says so) and loads the original
model instead of an embedded copy.

Pipelines saved before records existed (a ``cfg`` without ``"provenance"``) load as before where
that is unambiguous: without ``encoder/`` the recorded model loads by its identity; with
``encoder/`` and ``embed_weights: true`` the copy loads once the checks of its own meta pass
(no links, ``subdir`` ``"model"``, files matching the meta's fingerprint; a meta without a
fingerprint is refused). An ``encoder/`` beside ``embed_weights: false`` is the stale state this
record exists to catch and is refused: save the pipeline again.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Optional, Union

import numpy as np
import srsly
from spacy.language import Language
from spacy.pipeline import TrainablePipe
from spacy.tokens import Doc
from spacy.training import Example, validate_examples
from spacy.vocab import Vocab
from thinc.api import Model, NumpyOps, Optimizer

from .._runtime import json_io as _json, provenance
from .._runtime.files import atomic_directory
from ..encoders._identity import ModelIdentity
from ..errors import FileFormatError, ProvenanceError
from ..pooling._layers import FixedCombine, LayerSpec, check_fixed_combine, check_layer_spec, resolve_layers
from ..pooling._subword import SubwordPooling
from ._encoder_layer import EncoderLayer
from ._doc_features import DocFeatures
from ._hooks import install_hooks, set_doc_vector
from ._combine_layers import pool_layers
from ._listener import ContextListener
from ._loader import EmbeddedCopy, EncoderLoader, embedded_fingerprint, embedded_meta, read_embedded, save_encoder

NUMPY_OPS = NumpyOps()
#: Doc extension holding ``{component name: (layers, tokens, width)}`` when ``store_layers=True``
DOC_EXTENSION = "contextembed"
ENCODER_DIR = "encoder"
#: key of the encoder's identity in the serialized cfg
IDENTITY_KEY = "encoder_identity"
#: the precision the encoder ran when the pipeline was saved: a loaded pipeline runs it again
PRECISION_KEY = "encoder_precision"
#: key of the provenance record in the serialized cfg (see the module docstring)
PROVENANCE_KEY = "provenance"
ARTIFACT = "spacy encoder component"
_RESAVE = "save the pipeline again"
_FIX_SETTINGS = (
    "if the setting was changed in the pipeline's config.cfg (or in the overrides passed to spacy.load), set it "
    "back; otherwise save the pipeline again with this contextembed and these settings (components trained on "
    "other features must be trained again)"
)

DEFAULT_CONFIG = {
    "encoder": {
        "@misc": "contextembed.Encoder.v2",
        "name": "minilm-l6",
        "device": "auto",
        "precision": "auto",
        "backend": "torch",
        "window": None,
        "stride": None,
        "batch_tokens": None,
    },
    "subword_pooling": "first",
    "tensor_layers": -1,
    "tensor_combine": "mean",
    "store_layers": False,
    "embed_weights": False,
    "cache_mb": 0,
}



@Language.factory("contextembed", default_config=DEFAULT_CONFIG)
def make_contextembed(
    nlp: Language,
    name: str,
    encoder: EncoderLoader,
    subword_pooling: SubwordPooling,
    tensor_layers: Union[int, list[int], str],
    tensor_combine: str,
    store_layers: bool,
    embed_weights: bool,
    cache_mb: float,
) -> "ContextEmbedder":
    """Build the component (the encoder itself loads on first use, never by download)."""
    return ContextEmbedder(
        nlp.vocab,
        EncoderLayer(encoder, subword_pooling, cache_mb),
        name=name,
        tensor_layers=tensor_layers,
        tensor_combine=tensor_combine,
        store_layers=store_layers,
        embed_weights=embed_weights,
    )


class ContextEmbedder(TrainablePipe):
    """Frozen contextual features for spaCy tokens, shared with listeners.

    Parameters
    ----------
    vocab : Vocab
        The pipeline's vocabulary.
    model : EncoderLayer
        The thinc layer around the encoder.
    name : str
        Component name (listeners name it as their ``upstream``).
    tensor_layers : int, list of int, "all" or "hidden"
        Layers pooled into ``doc.tensor``.
    tensor_combine : {"mean", "sum", "concat"}
        How they are combined for ``doc.tensor``.
    store_layers : bool
        Keep all computed layers on ``doc._.contextembed[name]`` ``(layers, tokens, width)``.
    embed_weights : bool
        ``to_disk`` writes the encoder's weights into the pipeline instead of its name.

    Notes
    -----
    The factory's ``cache_mb`` (default 0) keeps the features of docs seen before, keyed by their
    token texts, up to that many megabytes: with a frozen encoder this makes every ``spacy train``
    epoch after the first skip the encoder.
    """

    def __init__(
        self,
        vocab: Vocab,
        model: EncoderLayer,
        name: str = "contextembed",
        *,
        tensor_layers: LayerSpec = -1,
        tensor_combine: FixedCombine = "mean",
        store_layers: bool = False,
        embed_weights: bool = False,
    ) -> None:
        _check_tensor_pooling(tensor_layers, tensor_combine)
        self.vocab = vocab
        self.model = model
        self.name = name
        self.listener_map: dict[str, list[ContextListener]] = {}
        self.cfg: dict[str, Any] = {
            "tensor_layers": tensor_layers,
            "tensor_combine": tensor_combine,
            "store_layers": store_layers,
            "embed_weights": embed_weights,
        }
        if not Doc.has_extension(DOC_EXTENSION):
            Doc.set_extension(DOC_EXTENSION, default=None)

    # -- the encoder ----------------------------------------------------------------------------

    @property
    def encoder(self):
        """The frozen :class:`contextembed.Encoder` (loaded on first access)."""
        return self.model.encoder

    @property
    def feature_width(self) -> int:
        """Width of one layer's token vector."""
        return self.model.feature_width

    def tensor_layer_indexes(self) -> tuple[int, ...]:
        """The absolute encoder layers pooled into ``doc.tensor``."""
        try:
            return resolve_layers(self.cfg["tensor_layers"], self.encoder.n_layers)
        except ValueError as error:
            raise ValueError(
                f"component {self.name!r}: tensor_layers={self.cfg['tensor_layers']!r} does not fit "
                f"the encoder {self.encoder.spec!r}: {error}"
            ) from None

    # -- listeners (the spaCy ListenedToComponent protocol) -------------------------------------

    @property
    def listeners(self) -> list[ContextListener]:
        return [m for c in self.listening_components for m in self.listener_map[c]]

    @property
    def listening_components(self) -> list[str]:
        return list(self.listener_map.keys())

    def add_listener(self, listener: ContextListener, component_name: str) -> None:
        """Link a listener of a downstream component (spaCy calls this)."""
        self.listener_map.setdefault(component_name, [])
        if listener not in self.listener_map[component_name]:
            self.listener_map[component_name].append(listener)
        listener.upstream = self

    def remove_listener(self, listener: ContextListener, component_name: str) -> bool:
        """Unlink a listener (spaCy calls this when listeners are replaced)."""
        listeners = self.listener_map.get(component_name, [])
        if listener not in listeners:
            return False
        listeners.remove(listener)
        if not listeners:
            del self.listener_map[component_name]
        if listener.upstream is self:
            listener.upstream = None
        return True

    def find_listeners(self, component) -> None:
        """Link every :class:`ContextListener` in ``component`` whose upstream is ``*`` or this name."""
        if not isinstance(getattr(component, "model", None), Model):
            return
        for node in component.model.walk():
            if isinstance(node, ContextListener) and node.upstream_name in ("*", self.name):
                # with several contextembed components, '*' listens to the nearest one before it
                self.add_listener(node, component.name)

    def _own_listeners(self) -> list[ContextListener]:
        return [listener for listener in self.listeners if listener.upstream is self]

    def _needed_layers(self) -> tuple[int, ...]:
        """Union of the layers ``doc.tensor`` and the listeners pool (all with ``store_layers``)."""
        if self.cfg["store_layers"]:
            return tuple(range(self.encoder.n_layers))
        needed = set(self.tensor_layer_indexes())
        for listener in self._own_listeners():
            needed.update(listener.layer_indexes())
        return tuple(sorted(needed))

    # -- processing -----------------------------------------------------------------------------

    def __call__(self, doc: Doc) -> Doc:
        """Encode one doc (see :meth:`pipe`); anything but a ``Doc`` is a ``TypeError``."""
        check_doc(doc, "the doc")
        return super().__call__(doc)

    def pipe(self, stream: Iterable[Doc], *, batch_size: int = 128) -> Iterator[Doc]:
        """Encode a stream of docs in batches; an item that is not a ``Doc`` is a ``TypeError``
        naming its position in the stream."""
        checked = (check_doc(doc, f"item {i} of the stream") for i, doc in enumerate(stream))
        return super().pipe(checked, batch_size=batch_size)

    def predict(self, docs: Iterable[Doc]) -> list[DocFeatures]:
        """Encode a batch for annotation: one :class:`DocFeatures` ``(layers, tokens, width)`` per
        doc, with its default text vector (``doc.vector``)."""
        return self._encode_batch(docs, text=True)

    def _encode_batch(self, docs: Iterable[Doc], *, text: bool) -> list[DocFeatures]:
        """Encode the layers ``doc.tensor`` and the listeners need and send them to the listeners."""
        docs = list(docs)
        self.model.layer_index = self._needed_layers()
        features = self.model.encode(docs, text=text)
        for listener in self._own_listeners():
            listener.receive(docs, features)
        return features

    def set_annotations(self, docs: Sequence[Doc], features: Sequence[DocFeatures]) -> None:
        """Write the default pooling to ``doc.tensor`` and the default text vector for
        ``doc.vector``, install vector hooks, store layers if asked."""
        index, combine = self.tensor_layer_indexes(), self.cfg["tensor_combine"]
        for doc, feats in zip(docs, features):
            # (layers, tokens, width) -> (tokens, out_width)
            doc.tensor = np.ascontiguousarray(pool_layers(NUMPY_OPS, feats.select(index), combine))
            set_doc_vector(doc, feats.text)
            install_hooks(doc)
            if self.cfg["store_layers"]:
                stored = dict(doc._.get(DOC_EXTENSION) or {})
                stored[self.name] = feats.data
                doc._.set(DOC_EXTENSION, stored)

    def encode_docs(self, docs: Sequence[Doc], layer_index: tuple[int, ...]) -> list[DocFeatures]:
        """Encode ``docs`` now with the encoder layers ``layer_index`` (for listeners sent other docs)."""
        return self.model.encode(docs, layer_index)

    def stored_features(self, doc: Doc) -> Optional[DocFeatures]:
        """All layers stored on ``doc`` by this component (``store_layers=True``), or ``None``."""
        stored = doc._.get(DOC_EXTENSION) if Doc.has_extension(DOC_EXTENSION) else None
        if not stored or self.name not in stored:
            return None
        data = stored[self.name]
        return DocFeatures(data, tuple(range(data.shape[0])))

    def update(
        self,
        examples: Iterable[Example],
        *,
        drop: float = 0.0,
        sgd: Optional[Optimizer] = None,
        losses: Optional[dict[str, float]] = None,
    ) -> dict[str, float]:
        """Encode the batch and send it to the listeners; the encoder itself is frozen, so no loss is
        reported (``losses`` gets no entry for this component: see :attr:`is_trainable`)."""
        losses = {} if losses is None else losses
        examples = list(examples)
        validate_examples(examples, "ContextEmbedder.update")
        self._encode_batch([eg.predicted for eg in examples], text=False)  # the listeners need no doc.vector
        return losses

    @property
    def is_trainable(self) -> bool:
        """``False``: the encoder is frozen and trains nothing (the mixes live in the listeners).

        spaCy reads this to pick the components whose loss ``spacy train`` prints ("LOSS NER", ...)
        and whose ``finish_update`` it calls; ``Language.update`` still calls :meth:`update`, which
        is how the listeners get their batch. So, like spaCy's own frozen components, this one shows
        no loss column (it used to show "LOSS CONTEXTEMBED", always 0.00).
        """
        return False

    def get_loss(self, examples, scores) -> None:
        """``None``: a frozen encoder has no loss (the listeners' components have theirs)."""
        return None

    def finish_update(self, sgd: Optimizer) -> None:
        """Nothing to update: the encoder is frozen and the mixes live in the listeners."""

    def initialize(self, get_examples: Callable[[], Iterable[Example]], *, nlp: Optional[Language] = None) -> None:
        """Load the encoder and check the pooling settings and listeners against it."""
        self.tensor_layer_indexes()
        if nlp is not None:
            check_listener_upstreams(nlp)
        for listener in self._own_listeners():
            listener.layer_indexes()

    def add_label(self, label: str) -> int:
        """Always a ``NotImplementedError``: the component predicts no labels."""
        raise NotImplementedError(f"the {self.name!r} component has no labels")

    # -- serialization --------------------------------------------------------------------------

    def to_disk(self, path: Union[str, Path], *, exclude: Iterable[str] = tuple()) -> None:
        """Write the directory ``path`` whole: cfg with its provenance record, and the encoder's
        weights with ``embed_weights=True`` (unless ``"encoder"`` is in ``exclude``).

        Whatever was at ``path`` is replaced only once the new directory is complete.
        """
        path = Path(path)
        embed = bool(self.cfg["embed_weights"]) and ENCODER_DIR not in exclude
        self._check_keeps_its_encoder(path, embed)
        with atomic_directory(path, overwrite=True, what=f"directory of the {self.name!r} component") as temporary:
            embedded = None
            if embed:
                save_encoder(self.encoder, Path(temporary, ENCODER_DIR))
                embedded = embedded_fingerprint(Path(temporary, ENCODER_DIR))
            srsly.write_json(Path(temporary, "cfg"), self._cfg_to_save(embedded))

    def from_disk(self, path: Union[str, Path], *, exclude: Iterable[str] = tuple()) -> "ContextEmbedder":
        """Read cfg and check it and the embedded encoder, if any, before anything loads (see the
        module docstring); ``exclude=["encoder"]`` ignores an embedded copy."""
        path = Path(path)
        if not (path / "cfg").exists():
            if os.path.lexists(path / ENCODER_DIR):
                raise ProvenanceError(f"{path / ENCODER_DIR} is there without the component's cfg; the component "
                                      f"directory {path} is incomplete: {_RESAVE}", artifact=str(path), field=None)
            return self
        cfg = _saved_cfg(_unpack(_json.read, path / "cfg", path / "cfg"), path / "cfg")
        record = cfg.pop(PROVENANCE_KEY, None)
        use_copy = ENCODER_DIR not in exclude
        if record is None:
            copy = self._legacy_copy(path, cfg) if use_copy else None
        else:
            self._check_record(record, cfg, f"the saved {self.name!r} component {path}", embedded=None)
            copy = self._recorded_copy(path, record) if use_copy else None
        self._read_cfg(cfg, path / "cfg")
        if copy is not None:
            self.model.loader.use_embedded(copy)
        return self

    def to_bytes(self, *, exclude: Iterable[str] = tuple()) -> bytes:
        """Serialize cfg only; the encoder is referred to by name (``embed_weights`` needs to_disk)."""
        return srsly.msgpack_dumps({"cfg": self._cfg_to_save(None)})

    def from_bytes(self, bytes_data: bytes, *, exclude: Iterable[str] = tuple()) -> "ContextEmbedder":
        """Read what :meth:`to_bytes` wrote: the cfg, checked against its provenance record where it
        has one; the encoder loads by name, as the cfg says."""
        where = f"the serialized {self.name!r} component"
        packed = _unpack(srsly.msgpack_loads, bytes_data, where)
        cfg = _saved_cfg(packed.get("cfg") if isinstance(packed, dict) else packed, where)
        record = cfg.pop(PROVENANCE_KEY, None)
        if record is not None:  # bytes written before records carry no weights: nothing is ambiguous
            self._check_record(record, cfg, f"the serialized {self.name!r} component", embedded=False)
        self._read_cfg(cfg, where)
        return self

    def _cfg_to_save(self, embedded: Optional[str]) -> dict:
        """cfg plus the encoder's identity (location and file fingerprint), so that a loaded pipeline
        refuses another model found under the same name or path, and the provenance record
        (``embedded``: the hash of the embedded encoder directory, ``None`` without one)."""
        identity = self.model.loader.identify().as_dict()
        record = self._record(self.cfg, identity["fingerprint"], embedded is not None, embedded)
        ran = {PRECISION_KEY: self.model.encoder.precision} if self.model.loader.loaded and hasattr(
            self.model.encoder, "precision") else {}
        return {**self.cfg, IDENTITY_KEY: identity, **ran, PROVENANCE_KEY: record}

    def _record(self, cfg: Mapping, model: Optional[str], embedded, embedded_hash: Optional[str]) -> dict:
        """The provenance record of a save of this component with ``cfg`` (see the module docstring)."""
        options = self.model.loader.options
        return provenance.record(
            ARTIFACT, embedded=embedded, embedded_fingerprint=embedded_hash, model=model,
            subword_pooling=self.model.attrs["subword_pooling"], window=options.get("window"),
            stride=options.get("stride"), tensor_layers=cfg.get("tensor_layers"),
            tensor_combine=cfg.get("tensor_combine"))

    def _check_record(self, record, cfg: Mapping, artifact: str, *, embedded: Optional[bool]) -> None:
        """Refuse a saved record that differs from what this component would write for the model
        ``cfg`` names, with the settings saved in ``cfg`` or with the ones configured now
        (``embedded=None``: whatever the record says, checked against the files by
        :meth:`_recorded_copy`)."""
        saved = record if isinstance(record, Mapping) else {}
        if embedded is None:
            embedded = saved.get("embedded")
            embedded_hash = saved.get("embedded_fingerprint")
        else:
            embedded_hash = None
        identity = cfg.get(IDENTITY_KEY)
        model = identity.get("fingerprint") if isinstance(identity, Mapping) else None
        for settings in (cfg, self.cfg):  # the saved settings (an edited cfg), then the ones configured now
            expected = self._record(settings, model, embedded, embedded_hash)
            provenance.check(record, expected, artifact=artifact, fix=_FIX_SETTINGS)
        if not isinstance(embedded, bool):
            raise ProvenanceError(f"{artifact} has a damaged provenance record (embedded={embedded!r}, expected true "
                                  f"or false); {_RESAVE}", artifact=artifact, field="embedded")

    def _recorded_copy(self, path: Path, record: Mapping) -> Optional[EmbeddedCopy]:
        """The embedded encoder the record says was saved, checked against it file by file."""
        encoder_dir = path / ENCODER_DIR
        present = os.path.lexists(encoder_dir)
        artifact = f"the embedded encoder {encoder_dir}"
        if not record["embedded"]:
            if present:
                raise ProvenanceError(
                    f"{encoder_dir} is not part of this save ({path / 'cfg'} records no embedded encoder): it is left "
                    f"over from an earlier save or was copied in; delete it, or {_RESAVE}",
                    artifact=artifact, field="embedded")
            return None
        if not present:
            raise ProvenanceError(
                f"{path / 'cfg'} records an embedded encoder in {encoder_dir}, but there is none: the pipeline was "
                f"copied without it; copy the whole pipeline directory, or {_RESAVE}", artifact=artifact,
                field="embedded")
        meta = embedded_meta(encoder_dir)  # no links, no subdir leading elsewhere: before hashing anything
        found = embedded_fingerprint(encoder_dir)
        if found != record["embedded_fingerprint"]:
            raise ProvenanceError(
                f"the files in {encoder_dir} differ from the ones this pipeline saved (embedded_fingerprint "
                f"{found[:12]} found, {str(record['embedded_fingerprint'])[:12]} recorded in {path / 'cfg'}): edited, "
                f"truncated, or swapped in from another save; {_RESAVE} from the pipeline or model it came from",
                artifact=artifact, field="embedded_fingerprint")
        return read_embedded(encoder_dir, meta)

    def _legacy_copy(self, path: Path, cfg: Mapping) -> Optional[EmbeddedCopy]:
        """The embedded encoder of a pipeline saved before provenance records, where unambiguous."""
        encoder_dir = path / ENCODER_DIR
        if not os.path.lexists(encoder_dir):
            return None
        if not cfg.get("embed_weights"):
            raise ProvenanceError(
                f"{encoder_dir} is there, but {path / 'cfg'} says embed_weights=false and records no provenance "
                "(saved by an older contextembed): the directory is most likely left over from an earlier save, "
                f"and which encoder the pipeline was trained with cannot be told; delete {encoder_dir} if it "
                f"should use {self.model.loader.name!r}, or {_RESAVE}",
                artifact=f"the saved {self.name!r} component {path}", field="embed_weights")
        return read_embedded(encoder_dir, embedded_meta(encoder_dir))

    def _check_keeps_its_encoder(self, path: Path, embed: bool) -> None:
        """Refuse to save without weights over the embedded copy this component loads from."""
        source = self.model.loader.embedded_source
        if embed or source is None:
            return
        if Path(source).resolve().is_relative_to(path.resolve()):
            raise ValueError(
                f"the {self.name!r} component's encoder was loaded from the embedded copy {source}, which saving "
                f"to {path} without its weights would delete (the saved pipeline could not load); keep "
                "embed_weights=true (and 'encoder' out of exclude), or save to another directory"
            )

    def _read_cfg(self, cfg: Mapping, where: Union[str, Path]) -> None:
        """Load the model the saved ``cfg`` (read from ``where``) names from now on. The settings stay as configured
        (``config.cfg`` and the overrides given to ``spacy.load``): the saved ones that shape the
        features were checked against them by the record, and the others (``store_layers``,
        ``embed_weights``) are the caller's to change."""
        identity = cfg.get(IDENTITY_KEY)
        if identity is not None:
            self.model.loader.expect(_saved_identity(identity, where))
        precision = cfg.get(PRECISION_KEY)
        if precision is not None and self.model.loader.options.get("precision", "auto") == "auto":
            # what the pipeline's listeners were trained on: run it again (not what auto chooses here)
            self.model.loader.options["precision"] = _saved_precision(precision, where)


def _saved_precision(precision, where: Union[str, Path]) -> str:
    """The saved ``encoder_precision``, checked (a damaged or edited cfg is refused, naming it)."""
    from .._runtime.devices import check_precision

    try:
        return check_precision(precision)
    except ValueError as error:
        raise _damaged(f"field {PRECISION_KEY!r}: {error}; {_RESAVE}", where) from None


def check_doc(doc, where: str) -> Doc:
    """Return ``doc`` if it is a spaCy ``Doc``, else raise ``TypeError`` naming ``where``."""
    if not isinstance(doc, Doc):
        raise TypeError(
            f"{where} is {type(doc).__name__} ({str(doc)[:40]!r}); the contextembed component takes "
            "spacy.tokens.Doc objects: call nlp(text) or nlp.pipe(texts) for raw text"
        )
    return doc


def _unpack(load: Callable[[Any], Any], data: Any, where: Union[str, Path]) -> Any:
    """``load(data)``; a :class:`~contextembed.errors.FileFormatError` naming ``where`` (the file, or
    what the bytes are) if that fails: not JSON or msgpack, not UTF-8 (a damaged or truncated save)."""
    try:
        return load(data)
    except ValueError as error:
        raise _damaged(f"cannot be read as the component's saved settings ({error}); {_RESAVE}", where) from None


def _saved_cfg(cfg: Any, where: Union[str, Path]) -> dict:
    """A copy of the saved settings ``cfg``, which must be a mapping (else ``FileFormatError``)."""
    if not isinstance(cfg, Mapping):
        raise _damaged(f"holds {type(cfg).__name__} {str(cfg)[:40]!r} where the component's settings (an object) "
                       f"should be; {_RESAVE}", where)
    return dict(cfg)


def _saved_identity(identity: Any, where: Union[str, Path]) -> ModelIdentity:
    """The encoder's identity recorded in a saved cfg (read from ``where``); ``FileFormatError`` if damaged."""
    if isinstance(identity, Mapping):
        try:
            return ModelIdentity.from_dict(dict(identity))
        except KeyError:
            pass
    raise _damaged(f"its {IDENTITY_KEY} {str(identity)[:80]!r} is damaged (expected an object with spec, kind, "
                   f"location and fingerprint); {_RESAVE}", where) from None


def _damaged(message: str, where: Union[str, Path]) -> FileFormatError:
    return FileFormatError(message, path=where) if isinstance(where, Path) else FileFormatError(f"{where}: {message}")


def check_listener_upstreams(nlp: Language) -> None:
    """Raise a readable error for a listener whose ``upstream`` names no ``contextembed`` component."""
    names = [name for name, proc in nlp.pipeline if isinstance(proc, ContextEmbedder)]
    for component_name, proc in nlp.pipeline:
        model = getattr(proc, "model", None)
        if not isinstance(model, Model):
            continue
        for node in model.walk():
            if isinstance(node, ContextListener) and node.upstream_name not in ("*", *names):
                raise ValueError(
                    f"the contextembed listener in component {component_name!r} has "
                    f"upstream={node.upstream_name!r}, but the pipeline's contextembed components are "
                    f"{names}; set upstream to one of them or '*'"
                )


def _check_tensor_pooling(layers: LayerSpec, combine: str) -> None:
    check_fixed_combine(combine, "tensor_combine")
    check_layer_spec(layers)  # the range is checked against the encoder on first use
