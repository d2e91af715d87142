"""AllenNLP's original ELMo ``weights.hdf5`` (TF layout) <-> :class:`BiLMEncoderModule`.

Datasets (``F`` = total filters, ``P`` = projection dim, ``C`` = LSTM cell dim, ``d`` = char
embedding dim), and how each becomes torch parameters:

==================================================  ==================  ===============================
dataset                                             shape               torch
==================================================  ==================  ===============================
``char_embed``                                      ``(261, d)``        embedding rows 1.. (row 0 = 0)
``CNN/W_cnn_{i}``                                   ``(1, w, d, n)``    ``squeeze(0).transpose(2,1,0)``
``CNN/b_cnn_{i}``                                   ``(n,)``            conv bias
``CNN_high_{k}/W_transform``, ``W_carry``           ``(F, F)``          ``[W_transform^T ; -W_carry^T]``
``CNN_high_{k}/b_transform``, ``b_carry``           ``(F,)``            ``[b_transform ; -b_carry]``
``CNN_proj/W_proj``, ``b_proj``                     ``(F, P)``, (P,)    ``W_proj^T``, bias
``RNN_{dir}/RNN/MultiRNNCell/Cell{l}/LSTMCell/W_0`` ``(2P, 4C)``        ``W_0^T`` split at P, gate
                                                                        blocks 1 and 2 swapped
``.../B``                                           ``(4C,)``           blocks 1 and 2 swapped
``.../W_P_0``                                       ``(C, P)``          ``W_P_0^T``
==================================================  ==================  ===============================

``dir`` 0 is the forward LM, 1 the backward LM. TF gate order is (i, j, f, o), torch's is
(i, f, j, o); TF's forget-gate +1 is a run-time constant in :class:`ProjectedLSTM`, never stored,
so save -> load is bit-exact. Extra datasets in the file (e.g. a softmax) are ignored.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Optional

import numpy as np
import torch

from ...errors import missing_extra
from .modules import BiLMEncoderModule, ProjectedLSTM
from .options import ElmoFormatError, n_filters


@dataclass(frozen=True)
class WeightSpec:
    """One hdf5 dataset: its name, its shape, and how it maps to the module's parameters."""

    dataset: str
    shape: tuple[int, ...]
    #: copy a TF-layout array into the module
    read: Callable[[np.ndarray], None]
    #: the TF-layout array from the module
    write: Callable[[], np.ndarray]


def _h5py():
    try:
        import h5py
    except ImportError as error:
        raise missing_extra("h5py", "elmo", "reading and writing ELMo weights.hdf5") from error
    return h5py


def expected_shapes(options: Mapping) -> dict[str, tuple[int, ...]]:
    """Every dataset a ``weights.hdf5`` for ``options`` must hold, with its shape (file order).

    Computed from the options alone (the same table :func:`weight_specs` builds from a module).
    """
    cnn, lstm = options["char_cnn"], options["lstm"]
    d, f = cnn["embedding"]["dim"], n_filters(options)
    p, c = lstm["projection_dim"], lstm["dim"]
    shapes: dict[str, tuple[int, ...]] = {"char_embed": (cnn["n_characters"] - 1, d)}
    for i, (width, n) in enumerate(cnn["filters"]):
        shapes[f"CNN/W_cnn_{i}"], shapes[f"CNN/b_cnn_{i}"] = (1, width, d, n), (n,)
    for k in range(cnn["n_highway"]):
        for name in ("transform", "carry"):
            shapes[f"CNN_high_{k}/W_{name}"], shapes[f"CNN_high_{k}/b_{name}"] = (f, f), (f,)
    shapes["CNN_proj/W_proj"], shapes["CNN_proj/b_proj"] = (f, p), (p,)
    for direction in (0, 1):
        for layer in range(lstm["n_layers"]):
            prefix = f"RNN_{direction}/RNN/MultiRNNCell/Cell{layer}/LSTMCell"
            shapes[f"{prefix}/W_0"], shapes[f"{prefix}/B"], shapes[f"{prefix}/W_P_0"] = (2 * p, 4 * c), (4 * c,), (c, p)
    return shapes


def weight_specs(module: BiLMEncoderModule) -> list[WeightSpec]:
    """The full TF layout of ``module``, in file order."""
    return [*_char_cnn_specs(module), *_lstm_specs(module)]


def load_weights(module: BiLMEncoderModule, path: str | os.PathLike) -> BiLMEncoderModule:
    """Copy the datasets of an original-layout ``weights.hdf5`` into ``module`` (in place).

    Raises
    ------
    ModelNotFoundError
        The file does not exist.
    ElmoFormatError
        A dataset is missing or has the wrong shape (the message names file, dataset, shapes).
    """
    from ...errors import ModelNotFoundError

    path = os.fspath(path)
    if not os.path.isfile(path):
        raise ModelNotFoundError(f"ELMo weights file {path} does not exist (expected weights.hdf5 beside options.json)")
    h5py = _h5py()
    try:
        with h5py.File(path, "r") as handle, torch.no_grad():
            for spec in weight_specs(module):
                spec.read(_read_dataset(handle, spec, path))
    except OSError as error:  # h5py: truncated file, not an HDF5 file, unreadable dataset
        raise ElmoFormatError(f"{path}: unreadable HDF5 file ({error}); it is truncated or corrupt") from None
    return module


def save_weights(
    module: BiLMEncoderModule, path: str | os.PathLike, extra: Optional[Mapping[str, np.ndarray]] = None
) -> None:
    """Write ``module`` as an original-layout ``weights.hdf5`` (float32), readable by AllenNLP.

    Parameters
    ----------
    extra : mapping of str to np.ndarray, optional
        More datasets to store beside the encoder (e.g. a trainer's softmax); loaders ignore them.
        Checked before the file is opened (:func:`check_extra`).

    Raises
    ------
    TypeError, ValueError
        For an ``extra`` :func:`check_extra` refuses, naming ``extra`` and the key.
    """
    specs = weight_specs(module)
    extra = check_extra(extra, [spec.dataset for spec in specs])
    h5py = _h5py()
    with h5py.File(os.fspath(path), "w") as handle, torch.no_grad():
        for spec in specs:
            handle.create_dataset(spec.dataset, data=np.asarray(spec.write(), dtype=np.float32))
        for name, value in extra.items():
            handle.create_dataset(name, data=value)


#: the dtype kinds HDF5 stores natively: bool, signed and unsigned ints, floats, complex numbers
_HDF5_KINDS = "biufc"
#: a dataset name: parts separated by single ``/``, none of them ``.`` or ``..``
_DATASET_NAME = re.compile(r"(?!\.\.?(?:/|$))[^/]+(?:/(?!\.\.?(?:/|$))[^/]+)*")


def check_extra(extra: object, datasets: list[str]) -> dict[str, np.ndarray]:
    """``extra`` as ``{name: array}``, checked against the model's own ``datasets``.

    Raises
    ------
    TypeError
        ``extra`` is not a mapping (or ``None``), a key is not a ``str``, or a value is not an
        array of numbers (an object or string array has no native HDF5 type).
    ValueError
        A key that is not a dataset name (``a`` or ``a/b``: no empty, ``.`` or ``..`` part), or that
        names one of the model's datasets, a group of them, a place inside one of them, or a place
        inside another key's dataset; each naming ``extra`` and the key.
    """
    if extra is None:
        return {}
    if not isinstance(extra, Mapping):
        raise TypeError(f"extra must be a mapping of dataset names to arrays (or None), got {type(extra).__name__}")
    checked: dict[str, np.ndarray] = {}
    for name, value in extra.items():
        if not isinstance(name, str):
            raise TypeError(f"extra's keys must be str dataset names, got {type(name).__name__} {name!r:.40}")
        _check_extra_name(name, datasets, list(checked))
        array = np.asarray(value)
        if array.dtype.kind not in _HDF5_KINDS:
            raise TypeError(f"extra[{name!r}] is an array of dtype {array.dtype}, which HDF5 cannot store: pass numbers "
                            "(bool, int, float or complex)")
        checked[name] = array
    return checked


def _check_extra_name(name: str, datasets: list[str], others: list[str]) -> None:
    """``name`` is a dataset name clear of the model's ``datasets`` and of the ``others`` keys."""
    if not _DATASET_NAME.fullmatch(name):
        raise ValueError(f"extra[{name!r}]: a dataset name must be parts separated by '/' ('softmax' or 'softmax/W'), "
                         "none empty, '.' or '..'")
    for taken, whose in [*((dataset, "the model's dataset") for dataset in datasets),
                         *((other, "extra") for other in others)]:
        if taken == name and whose == "extra":
            continue  # a mapping holds each key once
        if taken == name:
            raise ValueError(f"extra[{name!r}] names a dataset the model writes itself ({name!r}): pick another name")
        if taken.startswith(name + "/"):
            what = "the model's datasets" if whose != "extra" else "extra's datasets"
            raise ValueError(f"extra[{name!r}] names a group of {what} ({taken!r}): pick another name")
        if name.startswith(taken + "/"):
            where = f"the model's dataset {taken!r}" if whose != "extra" else f"extra[{taken!r}]"
            raise ValueError(f"extra[{name!r}] would be inside {where}, a dataset, not a group: pick another name")


def _read_dataset(handle, spec: WeightSpec, path: str) -> np.ndarray:
    if spec.dataset not in handle:
        raise ElmoFormatError(
            f"{path}: dataset '{spec.dataset}' is missing (expected shape {spec.shape}); is this an "
            "ELMo weights file matching options.json?"
        )
    dataset = handle[spec.dataset]
    if tuple(dataset.shape) != spec.shape:
        raise ElmoFormatError(
            f"{path}: dataset '{spec.dataset}' has shape {tuple(dataset.shape)}, expected {spec.shape} "
            "from options.json; the options and weights do not belong together"
        )
    data = np.asarray(dataset[...], dtype=np.float32)
    if not np.isfinite(data).all():
        raise ElmoFormatError(
            f"{path}: dataset '{spec.dataset}' holds {int((~np.isfinite(data)).sum())} NaN or infinite values; "
            "the weights are corrupt"
        )
    return data


# -- the character CNN ---------------------------------------------------------------------------


def _param_setter(param: torch.Tensor, convert: Callable[[np.ndarray], np.ndarray] = lambda a: a):
    def read(array: np.ndarray) -> None:
        param.copy_(torch.from_numpy(np.ascontiguousarray(convert(array))))

    return read


def _getter(param: torch.Tensor, convert: Callable[[np.ndarray], np.ndarray] = lambda a: a):
    return lambda: np.ascontiguousarray(convert(param.detach().float().cpu().numpy()))


def _char_cnn_specs(module: BiLMEncoderModule) -> Iterator[WeightSpec]:
    embedder = module.token_embedder
    embedding = embedder.char_embedding.weight
    yield WeightSpec("char_embed", tuple(embedding[1:].shape), _read_char_embed(embedding), _getter(embedding[1:]))
    for i, conv in enumerate(embedder.convolutions):
        n, d, w = conv.weight.shape
        to_torch = lambda a: a[0].transpose(2, 1, 0)  # (1, w, d, n) -> (n, d, w)
        to_tf = lambda a: a.transpose(2, 1, 0)[None]
        yield WeightSpec(f"CNN/W_cnn_{i}", (1, w, d, n), _param_setter(conv.weight, to_torch), _getter(conv.weight, to_tf))
        yield WeightSpec(f"CNN/b_cnn_{i}", (n,), _param_setter(conv.bias), _getter(conv.bias))
    width = n_filters(module.options)
    for k, highway in enumerate(embedder.highways):
        yield from _highway_specs(k, highway, width)
    projection = embedder.projection
    transpose = lambda a: a.T
    yield WeightSpec("CNN_proj/W_proj", (width, module.projection_dim),
                     _param_setter(projection.weight, transpose), _getter(projection.weight, transpose))
    yield WeightSpec("CNN_proj/b_proj", (module.projection_dim,), _param_setter(projection.bias), _getter(projection.bias))


def _read_char_embed(embedding: torch.Tensor):
    def read(array: np.ndarray) -> None:
        embedding[0].zero_()
        embedding[1:].copy_(torch.from_numpy(array))

    return read


def _highway_specs(k: int, highway: torch.nn.Linear, width: int) -> Iterator[WeightSpec]:
    """Transform rows ``[:F]`` keep TF's sign; carry rows ``[F:]`` are negated (an exact flip)."""
    halves = {"transform": (slice(0, width), 1.0), "carry": (slice(width, 2 * width), -1.0)}
    for name, (rows, sign) in halves.items():
        weight, bias = highway.weight[rows], highway.bias[rows]
        yield WeightSpec(f"CNN_high_{k}/W_{name}", (width, width),
                         _param_setter(weight, lambda a, s=sign: s * a.T), _getter(weight, lambda a, s=sign: s * a.T))
        yield WeightSpec(f"CNN_high_{k}/b_{name}", (width,),
                         _param_setter(bias, lambda a, s=sign: s * a), _getter(bias, lambda a, s=sign: s * a))


# -- the LSTMs -----------------------------------------------------------------------------------


def _swap_gates(array: np.ndarray, cell: int) -> np.ndarray:
    """Swap gate blocks 1 and 2 along axis 0 (TF i,j,f,o <-> torch i,f,j,o; an involution)."""
    order = np.r_[0:cell, 2 * cell : 3 * cell, cell : 2 * cell, 3 * cell : 4 * cell]
    return array[order]


def _lstm_specs(module: BiLMEncoderModule) -> Iterator[WeightSpec]:
    for direction, layers in enumerate((module.forward_layers, module.backward_layers)):
        for index, layer in enumerate(layers):
            prefix = f"RNN_{direction}/RNN/MultiRNNCell/Cell{index}/LSTMCell"
            yield from _lstm_layer_specs(prefix, layer)


def _lstm_layer_specs(prefix: str, layer: ProjectedLSTM) -> Iterator[WeightSpec]:
    cell, n_in, n_proj = layer.cell_size, layer.input_size, layer.projection_size
    w_in, w_state = layer.input_linearity.weight, layer.state_linearity.weight

    def read_kernel(array: np.ndarray) -> None:
        # (4C, in + P), gate blocks in torch order
        torch_w = _swap_gates(array.T, cell)
        w_in.copy_(torch.from_numpy(np.ascontiguousarray(torch_w[:, :n_in])))
        w_state.copy_(torch.from_numpy(np.ascontiguousarray(torch_w[:, n_in:])))

    def write_kernel() -> np.ndarray:
        torch_w = torch.cat([w_in, w_state], dim=1).detach().float().cpu().numpy()
        return np.ascontiguousarray(_swap_gates(torch_w, cell).T)

    bias = layer.input_linearity.bias
    swap = lambda a: _swap_gates(a, cell)
    projection = layer.projection.weight
    transpose = lambda a: a.T
    yield WeightSpec(f"{prefix}/W_0", (n_in + n_proj, 4 * cell), read_kernel, write_kernel)
    yield WeightSpec(f"{prefix}/B", (4 * cell,), _param_setter(bias, swap), _getter(bias, swap))
    yield WeightSpec(f"{prefix}/W_P_0", (cell, n_proj), _param_setter(projection, transpose), _getter(projection, transpose))
