"""OpenVINO under the transformer path: the model exported once, its forward pass run by fused kernels.

:class:`~contextembed.encoders.transformer.TransformerEncoder` keeps everything around the forward
pass (tokenizing, windows, length-sorted batches, streams, the piece selectors, CLS, pairs): with
``backend="openvino"`` only the call that turns a padded batch into hidden states changes. So every
contract of the torch path holds on the engine: one row per word, long inputs by windows, results
in input order.

Export
    The model is wrapped to return its hidden states up to the highest layer a call asks for (the
    layers above are not in the exported graph, so they are not run) and converted with
    ``openvino.convert_model``; ``precision="int8"`` then quantizes it statically with NNCF on
    calibration text (:data:`CALIBRATION_FILE`, bundled, or the sentences passed as
    ``calibration=``). Exports are cached in :func:`cache_root`, one directory per
    (model fingerprint, engine and exporter versions, top layer, inputs, precision, calibration),
    written under a temporary name and renamed when complete, with a provenance record that holds
    all of those and the hash of the exported files. A cached export is used only if its record
    and files match; a stale or damaged one is exported again (:class:`EngineCacheWarning`), never
    replaced by another numeric path.
    A cache directory that is not a directory or cannot be written (``CONTEXTEMBED_ENGINE_CACHE``)
    is a :class:`~contextembed.errors.SettingError` naming the variable, the path and the fix
    (:func:`checked_cache_root`), with ``backend="auto"`` too: a setting to fix, not a fallback.
    So is one that another user could write (a link, another user's, group- or world-writable:
    :func:`contextembed._runtime.files.untrusted_reason`), since an export there decides what this process
    computes. Inside a trusted cache, an export (its folder, record and files, and the compiled blobs)
    another user could have written is exported (or compiled) again with an
    :class:`EngineCacheWarning`; what is written there is never writable by group or others.

Precisions
    ``"fp32"`` forces the engine's f32 inference precision (OpenVINO otherwise computes in bf16 on
    CPUs that have it); ``"bf16"`` asks for bf16 and is refused on a CPU without bf16 units (the
    engine would quietly compute in f32); ``"int8"`` runs the statically quantized export.

No socket
    OpenVINO (on import and in its converter) and NNCF send usage telemetry unless told not to;
    every import of and call into them here runs with their telemetry consent declined
    (:func:`_no_telemetry`), and a telemetry object made earlier is switched off.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import io
import json
import logging
import os
import stat
import tempfile
import threading
import warnings
from collections.abc import Iterator, Sequence
from importlib import resources
from typing import Optional

import numpy as np
import torch

from ..._runtime import provenance
from ... import settings
from ..._runtime.files import (TRUST_RULE, UntrustedPathError, atomic_directory, make_trusted_directory, read_trusted,
                      remove_stale_partials, restrict_writes, untrusted_reason)
from ..._runtime.signal_stack import signal_stack_kept
from ...errors import EngineError, ProvenanceError, SettingError, missing_extra
from ...tuning import announce

logger = logging.getLogger(__name__)

#: environment variable naming the directory of cached exports
ENGINE_CACHE_ENV = "CONTEXTEMBED_ENGINE_CACHE"
#: what the provenance record of a cached export calls it
ARTIFACT = "engine export"
#: the precisions the engine runs
ENGINE_PRECISIONS = ("fp32", "bf16", "int8")
#: OpenVINO's name of each precision's inference precision hint
_HINTS = {"fp32": "f32", "bf16": "bf16", "int8": "f32"}
#: the bundled calibration text (one sentence per line, whitespace-tokenized)
CALIBRATION_FILE = "calibration.txt"
#: calibration sentences used at most (NNCF's default subset is 300)
MAX_CALIBRATION = 300
#: the exported file names inside a cache directory
_XML, _BIN = "model.xml", "model.bin"


class EngineCacheWarning(UserWarning):
    """A cached export did not match its provenance record (stale or damaged) and is exported again."""


def cache_root() -> str:
    """Where exports are cached: ``CONTEXTEMBED_ENGINE_CACHE``, else
    ``$XDG_CACHE_HOME/contextembed/engines`` (``~/.cache/contextembed/engines``)."""
    return settings.cache_directory(ENGINE_CACHE_ENV, "engines")


def checked_cache_root() -> str:
    """:func:`cache_root`, created if missing (mode ``0o755``) and checked to be a directory this
    process can write exports into and no other user can (:func:`contextembed._runtime.files.untrusted_reason`);
    else :class:`~contextembed.errors.SettingError` naming ``CONTEXTEMBED_ENGINE_CACHE``, the path,
    what is wrong and the fix (not a bare ``OSError`` from deep inside an export)."""
    root = cache_root()
    where = (f"{ENGINE_CACHE_ENV}={settings.raw(ENGINE_CACHE_ENV)!r}" if settings.raw(ENGINE_CACHE_ENV) is not None
             else f"the engine cache {root} ({ENGINE_CACHE_ENV} unset)")
    fix = f"set {ENGINE_CACHE_ENV} to a directory you can write, or unset it"
    if os.path.lexists(root) and not os.path.isdir(root):
        raise SettingError(f"{where}: {root} is not a directory, so engine exports cannot be cached there; {fix}")
    try:
        make_trusted_directory(root, mode=0o755)  # an image prepared ahead by root serves every user
    except UntrustedPathError as error:
        raise SettingError(f"{where}: {root} {error.reason}, so an export there could be another user's, not this "
                           f"model's; {TRUST_RULE} (or unset {ENGINE_CACHE_ENV})") from None
    except OSError as error:
        raise SettingError(f"{where}: cannot write engine exports into {root} ({error.strerror or error}); "
                           f"{fix}") from None
    try:
        # a real write, not os.access: the superuser passes access checks on a read-only file system
        os.rmdir(tempfile.mkdtemp(prefix=".writable-", dir=root))
    except OSError as error:
        raise SettingError(f"{where}: cannot write engine exports into {root} ({error.strerror or error}); "
                           f"{fix}") from None
    return root


def require_openvino():
    """The ``openvino`` module, or :class:`~contextembed.errors.MissingDependencyError` naming the extra."""
    try:
        with _no_telemetry():  # importing openvino sends an event unless declined
            return importlib.import_module("openvino")
    except ImportError as error:
        raise missing_extra("openvino", "openvino", "backend='openvino'") from error


def cpu_has_bf16() -> bool:
    """Whether OpenVINO computes bf16 natively on this CPU (its ``OPTIMIZATION_CAPABILITIES``)."""
    ov = require_openvino()
    with signal_stack_kept():  # the CPU plugin loads here (see _compile)
        return "BF16" in ov.Core().get_property("CPU", "OPTIMIZATION_CAPABILITIES")


def check_engine_precision(precision: str, device: torch.device) -> str:
    """``precision`` if the engine runs it here, else a ``ValueError`` saying what to use."""
    if device.type != "cpu":
        raise ValueError(
            f"backend='openvino' runs on the CPU; got device={str(device)!r}: use backend='torch' on a GPU"
        )
    if precision not in ENGINE_PRECISIONS:
        raise ValueError(f"precision={precision!r} does not run on backend='openvino'; use one of "
                         f"{', '.join(map(repr, ENGINE_PRECISIONS))} (or 'auto')")
    if precision == "bf16" and not cpu_has_bf16():
        raise ValueError(
            "precision='bf16' on backend='openvino': this CPU has no bf16 units (OpenVINO would compute "
            "in f32 instead); use 'fp32' or 'int8'"
        )
    return precision


def model_fingerprint(model: torch.nn.Module) -> str:
    """A hash of what the export depends on: the model's configuration and every tensor of its
    state (names, dtypes, shapes, bytes), so a moved model keeps its exports and a changed one
    never reuses them."""
    digest = hashlib.blake2b(digest_size=16)
    config = {k: v for k, v in model.config.to_dict().items() if k not in ("_name_or_path", "transformers_version")}
    digest.update(json.dumps(config, sort_keys=True, default=str).encode())
    for name, tensor in sorted(model.state_dict().items()):
        tensor = tensor.detach().cpu().contiguous()
        digest.update(f"\0{name}\0{tensor.dtype}\0{tuple(tensor.shape)}\0".encode())
        digest.update(tensor.reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def calibration_sentences(calibration: Optional[Sequence[Sequence[str]]]) -> list[list[str]]:
    """The sentences int8 is calibrated on: ``calibration`` (token lists; at most
    :data:`MAX_CALIBRATION` are used), else the bundled sample."""
    if calibration is None:
        text = resources.files("contextembed").joinpath("data", CALIBRATION_FILE).read_text(encoding="utf-8")
        calibration = [line.split() for line in text.splitlines() if line.strip()]
    sentences = [list(sentence) for sentence in calibration if len(sentence)]
    if not sentences:
        raise ValueError("calibration holds no non-empty sentence; pass token lists, or None for the bundled sample")
    return sentences[:MAX_CALIBRATION]


class _HiddenStates(torch.nn.Module):
    """The model's hidden states ``0 .. top`` as a tuple (what the export returns)."""

    def __init__(self, model: torch.nn.Module, top: int) -> None:
        super().__init__()
        self.model, self.top = model, top

    def forward(self, input_ids, attention_mask, token_type_ids=None):
        inputs = {"input_ids": input_ids, "attention_mask": attention_mask}
        if token_type_ids is not None:
            inputs["token_type_ids"] = token_type_ids
        return tuple(self.model(**inputs, output_hidden_states=True).hidden_states[: self.top + 1])


class OpenVinoForward:
    """The forward pass of one transformer on OpenVINO: padded batches in, hidden states out.

    Parameters
    ----------
    model : transformers.PreTrainedModel
        The fp32 model (on the CPU) to export.
    precision : {"fp32", "bf16", "int8"}
    n_layers : int
        Hidden states of the model (embeddings included).
    input_names : tuple of str
        ``("input_ids", "attention_mask")`` and ``"token_type_ids"`` where the model takes them.
    calibration_batches : callable, optional
        For int8: returns padded calibration batches (dicts of int64 arrays named as the inputs).
    calibration_hash : str
        Names the calibration text in the cache key.
    streams, threads : int
        Batches the caller runs at once and the threads each gets (:func:`contextembed._runtime.streams.cpu_streams`).
    fingerprint : str, optional
        :func:`model_fingerprint` of ``model``, where the caller has it.
    """

    backend = "openvino"

    def __init__(self, model, *, precision: str, n_layers: int, input_names: tuple[str, ...],
                 calibration_batches=None, calibration_hash: str = "", streams: int = 1, threads: int = 1,
                 fingerprint: Optional[str] = None) -> None:
        self.ov = require_openvino()
        self.model = model
        self.precision = precision
        self.n_layers = n_layers
        self.input_names = input_names
        self._calibration_batches = calibration_batches
        self._calibration_hash = calibration_hash if precision == "int8" else ""
        self._streams, self._threads = streams, threads
        self._fingerprint = fingerprint or model_fingerprint(model)
        self._compiled: dict[int, object] = {}
        self._lock = threading.Lock()
        self._local = threading.local()

    # -- what runs ------------------------------------------------------------------------------

    def __call__(self, inputs: dict[str, np.ndarray], wanted: Sequence[int]) -> list[np.ndarray]:
        """Hidden states ``wanted`` (indexes from 0, the embeddings) of a padded batch, each
        ``(batch, seq, width)`` float32."""
        top = max(wanted)
        compiled = self.compiled(top)
        # token types absent: the model's default, all zeros (single sentences)
        feed = {name: inputs[name] if name in inputs else np.zeros_like(inputs["input_ids"]) for name in self.input_names}
        requests = getattr(self._local, "requests", None)
        if requests is None:
            requests = self._local.requests = {}
        request = requests.get(top)
        if request is None:
            # A thread's first call into a compiled model runs alone. Two stream threads making their
            # first call at once hung (issue 37): one waited on a C++ static-initialisation guard while
            # holding the GIL, the other held the guard and waited for the GIL in pybind11's one-time
            # numpy set-up. Here the other thread waits on this lock, which releases the GIL.
            with self._lock:
                request = requests[top] = compiled.create_infer_request()
                outputs = request.infer(feed)
        else:
            outputs = request.infer(feed)
        return [np.asarray(outputs[compiled.output(i)]) for i in wanted]

    def compiled(self, top: int):
        """The compiled export returning hidden states ``0 .. top`` (exported on first use), warmed by
        one inference on the compiling thread before any stream calls it."""
        with self._lock:
            compiled = self._compiled.get(top)
            if compiled is None:
                compiled = self._compile(self.exported(top))
                _warm(compiled, self.input_names)
                self._compiled[top] = compiled
            return compiled

    def _compile(self, folder: str):
        config = {
            "INFERENCE_PRECISION_HINT": _HINTS[self.precision],
            "NUM_STREAMS": str(self._streams),
            "INFERENCE_NUM_THREADS": str(self._streams * self._threads),
        }
        core = self.ov.Core()
        blobs = compiled_cache(folder)
        if blobs is not None:  # OpenVINO's own cache of compiled blobs: later loads skip compiling
            config["CACHE_DIR"] = blobs
        # compiling installs OpenVINO's own alternate signal stack on this thread, freed with the
        # compiled model, maybe from another thread: this thread keeps its own (_signal_stack)
        with signal_stack_kept(), announce(f"compiling the OpenVINO model ({self.precision})", remembered_in=blobs or ""):
            compiled = core.compile_model(core.read_model(os.path.join(folder, _XML)), "CPU", config)
        if blobs is not None:
            restrict_writes(blobs)  # blobs OpenVINO wrote under the umask: no one else's to edit
        return compiled

    # -- the cache --------------------------------------------------------------------------------

    def expected_record(self, top: int) -> dict:
        """The provenance record an export for ``top`` must carry (the file hash aside)."""
        return provenance.record(
            ARTIFACT, backend=self.backend, engine=self.ov.__version__, model=self._fingerprint, top_layer=top,
            inputs=list(self.input_names), precision="int8" if self.precision == "int8" else "fp32",
            calibration=self._calibration_hash, quantizer=_version("nncf") if self.precision == "int8" else "",
            torch=torch.__version__, transformers=_version("transformers"),
        )

    def exported(self, top: int) -> str:
        """The directory of the cached export for ``top``, exported now if it is missing, stale or damaged."""
        expected = self.expected_record(top)
        key = {k: v for k, v in expected.items() if k != "contextembed"}
        root = checked_cache_root()
        folder = os.path.join(root, hashlib.blake2b(provenance.dumps(key), digest_size=12).hexdigest())
        if os.path.lexists(folder):
            try:
                check_export(folder, expected)
                logger.debug("engine export for layers 0..%d found in %s", top, folder)
                return folder
            except ProvenanceError as error:
                warnings.warn(f"{error}; exporting it again", EngineCacheWarning, stacklevel=4)
        for removed in remove_stale_partials(root):  # exports a killed process left half-written
            logger.info("removed %s, the partial export of a process that is gone", removed)
        with announce(f"exporting the model to OpenVINO (layers 0..{top}, {expected['precision']})", remembered_in=folder), \
                atomic_directory(folder, overwrite=True, what="engine export", mode=0o755) as temporary:
            self._export(top, temporary)
            provenance.write(os.path.join(temporary, provenance.PROVENANCE_FILE),
                             {**expected, "files": _files_hash(temporary)})
        return folder

    def _export(self, top: int, folder: str) -> None:
        example = {name: torch.ones((2, 6), dtype=torch.long) for name in self.input_names}
        example["attention_mask"][1, 4:] = 0
        if "token_type_ids" in example:
            example["token_type_ids"].zero_()
        with _no_telemetry(), _quiet_export(), signal_stack_kept():  # NNCF compiles to calibrate
            try:
                converted = self.ov.convert_model(_HiddenStates(self.model, top).eval(), example_input=example)
            except Exception as error:  # the converter raises its own error types
                raise EngineError(
                    f"OpenVINO cannot export model type {self._model_type()!r} ({_first_line(error)}); use "
                    "backend='torch', which runs every model transformers loads"
                ) from error
            if len(converted.outputs) != top + 1:
                raise EngineError(f"the OpenVINO export returned {len(converted.outputs)} outputs, expected {top + 1} "
                                  "hidden states; use backend='torch'")
            if self.precision == "int8":
                converted = self._quantized(converted)
        self.ov.save_model(converted, os.path.join(folder, _XML), compress_to_fp16=False)

    def _model_type(self) -> str:
        return getattr(self.model.config, "model_type", "?")

    def _quantized(self, converted):
        try:
            import nncf
        except ImportError as error:
            raise missing_extra("nncf", "openvino", "precision='int8' on backend='openvino'") from error
        batches = list(self._calibration_batches())
        data = nncf.Dataset(batches)
        level = nncf_logger().level
        nncf.set_log_level(logging.ERROR)
        try:
            # NNCF draws its progress bars on stdout (where the CLI may write its output): kept out
            with contextlib.redirect_stdout(io.StringIO()):
                # TRANSFORMER keeps what quantizes badly in transformers (softmax, layer norms, GELU
                # inputs) in float: the choices NNCF documents for BERT-style encoders
                return nncf.quantize(converted, data, model_type=nncf.ModelType.TRANSFORMER, subset_size=len(batches))
        except Exception as error:  # NNCF raises its own error types
            raise EngineError(f"NNCF cannot quantize model type {self._model_type()!r} for int8 on backend='openvino' "
                              f"({_first_line(error)}); use precision='fp32' on the engine, or backend='torch'") from error
        finally:
            nncf.set_log_level(level)


def available(device: torch.device) -> bool:
    """Whether ``backend="auto"`` considers the engine here: a CPU device and the package installed."""
    if device.type != "cpu":
        return False
    try:
        require_openvino()
    except ImportError:
        return False
    return True


#: the folder inside an export where OpenVINO keeps its compiled blobs (outside the export's hash)
COMPILED_FOLDER = "compiled"


def compiled_cache(export_folder: str) -> Optional[str]:
    """The directory of OpenVINO's compiled blobs of one export (its ``CACHE_DIR``, which names each
    blob by a hash of the model, the device and the compile settings, and compiles again where a
    blob does not load); ``None`` where it cannot be made (then each load compiles), or where it or
    a blob in it is not trusted (a link, or another user could have written it: then each load
    compiles, with one :class:`EngineCacheWarning` naming it)."""
    folder = os.path.join(export_folder, COMPILED_FOLDER)
    try:
        make_trusted_directory(folder, mode=0o755)
        for name in sorted(os.listdir(folder)):
            path = os.path.join(folder, name)
            reason = untrusted_reason(path, directory=stat.S_ISDIR(os.lstat(path).st_mode))
            if reason is not None:
                raise UntrustedPathError(path, reason)
    except UntrustedPathError as error:
        warnings.warn(f"compiled blobs of engine export {export_folder}: {error}; compiling without them",
                      EngineCacheWarning, stacklevel=4)
        return None
    except OSError:
        return None
    return folder


def _warm(compiled, input_names: Sequence[str]) -> None:
    """One inference of a one-row batch on this thread: OpenVINO's and pybind11's one-time set-up
    of a compiled model's first call happens here, not in two stream threads at once."""
    feed = {name: np.zeros((1, 4), dtype=np.int64) for name in input_names}
    feed["attention_mask"] = np.ones((1, 4), dtype=np.int64)
    compiled.create_infer_request().infer(feed)


def check_export(folder: str, expected: dict) -> None:
    """Refuse (``ProvenanceError``) a cached export whose record or files do not match ``expected``,
    or that another user could have written (:func:`_trusted_record`)."""
    artifact = f"engine export {folder}"
    found = _trusted_record(folder, artifact)
    missing = [name for name in (_XML, _BIN) if not os.path.isfile(os.path.join(folder, name))]
    if found is not None and missing:
        raise ProvenanceError(f"{artifact} lacks {', '.join(missing)}", artifact=artifact, field="files")
    files = _files_hash(folder) if found is not None else None
    provenance.check(found, {**expected, "files": files}, artifact=artifact,
                     fix=f"it is exported again; to stop that, delete {folder}")


def _trusted_record(folder: str, artifact: str) -> Optional[dict]:
    """The record of the export ``folder`` (``None``: it has none), read only if the folder, the
    record and the exported files may be trusted (:func:`contextembed._runtime.files.untrusted_reason`);
    else ``ProvenanceError`` saying which and why."""
    reason = untrusted_reason(folder, directory=True)
    if reason is not None:
        raise ProvenanceError(f"{artifact} {reason}; {TRUST_RULE}", artifact=artifact, field=None)
    for name in (_XML, _BIN):
        path = os.path.join(folder, name)
        reason = untrusted_reason(path, directory=False) if os.path.lexists(path) else None
        if reason is not None:
            raise ProvenanceError(f"{artifact}: {name} {reason}; {TRUST_RULE}", artifact=artifact, field=None)
    try:
        data = read_trusted(os.path.join(folder, provenance.PROVENANCE_FILE), max_bytes=provenance.MAX_RECORD_BYTES)
    except FileNotFoundError:
        return None
    except (UntrustedPathError, ValueError) as error:
        raise ProvenanceError(f"{artifact}: {error}", artifact=artifact, field=None) from None
    return provenance.loads(data, artifact=artifact)


def _files_hash(folder: str) -> str:
    """The hash of an export's files: its record and OpenVINO's compiled blobs (made after it, and
    checked by OpenVINO itself) left out."""
    return provenance.tree_hash(folder, skip=lambda relative: relative == provenance.PROVENANCE_FILE
                                or relative.split("/")[0] == COMPILED_FOLDER)


def _first_line(error: Exception) -> str:
    text = str(error)
    return f"{type(error).__name__}: {text.splitlines()[0] if text else ''}"


def nncf_logger() -> logging.Logger:
    """NNCF's logger (its level is restored after a quantization)."""
    return logging.getLogger("nncf")


def _version(package: str) -> str:
    try:
        return importlib.import_module(package).__version__
    except ImportError:
        return ""


@contextlib.contextmanager
def _no_telemetry() -> Iterator[None]:
    """OpenVINO's converter and NNCF with their telemetry consent declined: nothing is sent.

    Both ask ``openvino_telemetry``'s consent check, which says yes when no consent file exists;
    here it says no. Telemetry objects made before (a singleton) are switched off as well.
    """
    try:
        from openvino_telemetry import main as telemetry_main
        from openvino_telemetry.utils import opt_in_checker
    except ImportError:  # no telemetry package: nothing can be sent
        yield
        return
    checker = opt_in_checker.OptInChecker
    original = checker.check

    def declined(self, *args, **kwargs):
        return opt_in_checker.ConsentCheckResult.DECLINED

    checker.check = declined
    for instance in _telemetry_instances(telemetry_main):
        instance.consent = False
    try:
        yield
    finally:
        checker.check = original


@contextlib.contextmanager
def _quiet_export() -> Iterator[None]:
    """The tracer's and transformers' warnings about tracing (expected: shapes are dynamic) kept out
    of the user's terminal."""
    from transformers.utils import logging as hf_logging

    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", torch.jit.TracerWarning)
            warnings.filterwarnings("ignore", category=FutureWarning, module="transformers")
            yield
    finally:
        hf_logging.set_verbosity(verbosity)


def _telemetry_instances(telemetry_main) -> list:
    """The telemetry singleton, if one was made (its metaclass keeps it under a private name)."""
    instance = getattr(telemetry_main.Telemetry, "_SingletonMetaClass__single_instance", None)
    return [instance] if instance is not None and hasattr(instance, "consent") else []


__all__ = ["ARTIFACT", "CALIBRATION_FILE", "ENGINE_CACHE_ENV", "ENGINE_PRECISIONS", "EngineCacheWarning",
           "OpenVinoForward", "cache_root", "calibration_sentences", "checked_cache_root", "check_engine_precision", "check_export",
           "cpu_has_bf16", "model_fingerprint", "require_openvino"]
