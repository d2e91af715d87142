"""The parameters TextEmbedder, TokenEmbedder and TextPairEmbedder share, defined and documented once.

scikit-learn reads an estimator's parameters from the signature of its ``__init__``
(``get_params``, ``clone``), so each class still lists every parameter there, by name and with its
default, and only stores them (:func:`store_parameters`). What the classes share is here:

- the numpydoc entries of the shared parameters (:data:`MODEL_PARAMETERS`, :data:`RUN_PARAMETERS`)
  and fitted attributes (:data:`FITTED_ATTRIBUTES`), which :func:`shared_docs` writes into a class
  docstring where a line holds ``$model_parameters``, ``$run_parameters`` or ``$fitted_attributes``
  (and the taggers' ``$tagger_parameters``, :data:`TAGGER_PARAMETERS`);
- :data:`SHARED_DEFAULTS`, the default of each shared parameter that has one default everywhere,
  which ``tests/sklearn/test_parameters.py`` compares with every class's signature.

A parameter every estimator gains is added here once (its entry, its default) and to each
``__init__`` signature; the test fails for a class that lacks it or gives it another default.
"""

from __future__ import annotations

import inspect
import re

#: what the encoder is and how its layers become features (the first parameters of each class)
MODEL_PARAMETERS = """\
encoder : str or path
    What :func:`contextembed.load_encoder` takes: ``"minilm-l6"``, ``"glove-6b-50d"``, a model
    directory or a vectors file. Loaded in ``fit`` and shared by all clones in the process.
layers : int, sequence of int, "all" or "hidden"
    Which encoder layers to use (0 is the embedding layer, -1 the last).
combine : {"scalar_mix", "concat", "sum", "mean"}
    How to combine them. ``"scalar_mix"`` learns the mix in ``fit(X, y)`` when labels ``y`` are
    given (ELMo's recipe: jointly with a linear softmax probe, early-stopped on a held-out split
    of the training data); without ``y`` the weights stay equal.
subword_pooling : {"first", "last", "mean", "first_last", "max"}
    How a word's pieces become one vector (``"first_last"`` doubles the width).
"""

#: how the encoder runs, caches and is saved, and how the scalar mix is trained (the last ones)
RUN_PARAMETERS = """\
device : str
    ``"auto"`` picks CUDA when present.
precision : {"auto", "fp32", "bf16", "fp16", "int8"}
    Compute dtype of the encoder; features are float32 either way. Static vectors (a float32
    table) take ``"auto"`` or ``"fp32"`` only.
    Which to choose for a task and a machine: ``docs/choosing.md``.
backend : {"torch", "openvino", "auto"}
    What runs a transformer's forward pass: its own PyTorch
    forward (the exact path), OpenVINO on a cached export (the ``openvino`` extra), or the faster
    of the two as measured once per machine and model (remembered: :mod:`contextembed.tuning`).
    ``"auto"`` is resolved once, in ``fit`` (``backend_``), and
    every encoding after it (joblib workers included) runs that path; the encoding cache keeps
    each backend's features apart. ELMo and static vectors take ``"torch"`` or ``"auto"``.
    Which to choose for a task and a machine: ``docs/choosing.md``.
batch_tokens : int, optional
    Padded pieces per forward pass (default: the encoder's).
cache : "memory", None, path or joblib.Memory
    Where the encoded rows are kept (the feature store, at the unit the features need: each word's
    or text's layers, never every piece). ``"memory"``: the
    process-wide store, in memory within the memory budget (:func:`contextembed.set_memory_budget`)
    and beyond it in a temporary directory the job's processes share (joblib workers read what
    another process encoded); a directory path: kept there across sessions, in its subdirectory
    ``contextembed-cache`` (nothing else in the directory is written); a :class:`joblib.Memory`:
    in its location, likewise; ``None``: a call's rows are its own, encoded again by the next call.
cache_dtype : {"float32", "float16"}
    What the store keeps the rows in: ``"float16"`` halves their memory and disk (a fit on the
    full CoNLL-2003 training set with every layer of a BERT-base-sized model: 4 GB instead of 8)
    and the features are computed from the rounded rows; a value beyond float16's range is an
    error naming its sentence and word.
n_jobs : int, optional
    joblib workers encoding blocks of the input (any joblib backend); results are identical to
    ``n_jobs=1``. joblib's meaning: ``None`` or 1 one process, -1 one worker per core, -2 all
    but one; 0, a float or a str is refused in ``fit``.
embed_weights : bool
    Pickle the encoder's weights with the estimator (portable, but large). By default the
    pickle holds only the encoder reference and the learned pooling.
max_epochs : int
    Most epochs of mix training (at least 1).
validation_fraction : float
    Share of the training data (sentences, texts or pairs) held out for early stopping of mix
    training.
random_state : int, RandomState or None
    Seed of the validation split, initialisation and batch order of mix training: an int (0 to
    2**32 - 1) learns the same mix every fit; ``None`` a new one each fit; a
    ``numpy.random.RandomState`` draws each fit's seed from it (a sequence of fits is
    reproducible from the state's own seed).
show_progress : bool
    Progress bars on stderr (tqdm): one over the items each call encodes (those found in the
    cache are not counted), one over the epochs of mix training. Off by default, and in every
    clone (``GridSearchCV``) of an estimator that leaves it off; joblib workers never draw one.
dtype : {"float32", "float16"}
    Of the features ``transform`` and ``fit_transform`` return: ``"float16"`` rounds the float32
    features once, at the end (half the memory; the encodings, their cache and the mix training
    stay float32). Checked in ``fit`` and again where features are returned.
"""

#: what ``fit`` sets on every one of them (a numpydoc section, with its heading)
FITTED_ATTRIBUTES = """\
Attributes
----------
backend_ : {"torch", "openvino"}
    The backend the encoder runs (what ``backend="auto"`` chose).
precision_ : str
    The precision the encoder ran in ``fit`` (what ``precision="auto"`` chose: ``"fp32"``,
    ``"bf16"``, ``"int8"``, ``"fp16"``), which every later ``transform`` runs too, in this process
    and in any other (a joblib worker, the estimator unpickled on another machine or after
    ``CONTEXTEMBED_TUNING=refresh``): the features downstream estimators were trained on keep their
    numeric path. Where it cannot run (int8 on a GPU, bf16 on a GPU without it), ``"auto"``'s choice
    runs instead, with a ``PrecisionChangedWarning`` naming both.
mix_weights_ : np.ndarray
    ``(selected_layers,)`` normalised mix weights (``combine="scalar_mix"`` only).
gamma_ : float
    The mix's scale (``combine="scalar_mix"`` only).
layer_indexes_ : tuple of int
    The absolute encoder layers used.
subword_pooling_ : str
    The ``subword_pooling`` of ``fit``, which ``transform`` uses (so do ``text_pooling_``,
    ``normalize_`` and ``pair_features_`` where the class has them): a ``set_params`` after
    ``fit`` takes effect at the next ``fit``, and the columns always match
    ``get_feature_names_out``.
n_layers_ : int
    Layers of the encoder.
"""

#: what the trainable taggers (SequenceTagger, BiLSTMCRFTagger) take besides their own parameters
TAGGER_PARAMETERS = """\
n_threads : int, optional
    Threads for the tagger's own work (its training and decoding, the scalar-mix probe, the
    classifier's fit and predict): torch's intra-op pool and the BLAS and OpenMP pools of NumPy and
    scikit-learn (threadpoolctl), set back afterwards. The encoder is not run under it: it keeps the
    process's threads (``torch.set_num_threads``), since at base size the encoding is most of a
    fit's time and one thread would halve its speed. ``None`` (default): the settings as they are
    (torch's default is one thread per core). Lower it on a busy machine, where OpenMP threads spin against the
    other processes: a BiLSTM-CRF epoch took 12.9 s with torch's two threads and 1.9 s with one
    (same F1) on a 2-core machine shared with another job; on a quiet machine two threads ran 1.5x
    faster than one. An int from 1 to 1,024 (a bool, 0, a negative number: a ``ValueError``).
    The BLAS pools are shared by the whole process: calls (of any tagger, in any thread) with the
    same ``n_threads`` run together, one with another ``n_threads`` waits until they are done,
    and the last restores the counts; calls with ``None`` are not held back and run under
    whatever limit another call holds at the time.
"""

_BLOCKS = {"model_parameters": MODEL_PARAMETERS, "run_parameters": RUN_PARAMETERS,
           "fitted_attributes": FITTED_ATTRIBUTES, "tagger_parameters": TAGGER_PARAMETERS}

#: the default of every shared parameter that has one default in every class (``subword_pooling``
#: has its own: ``"mean"`` for whole texts, ``"first"`` for tokens and pairs)
SHARED_DEFAULTS = {
    "encoder": "minilm-l6", "layers": "all", "combine": "scalar_mix", "device": "auto", "precision": "auto",
    "backend": "torch", "batch_tokens": None, "cache": "memory", "n_jobs": None, "embed_weights": False, "max_epochs": 20,
    "validation_fraction": 0.1, "random_state": 0, "show_progress": False, "dtype": "float32",
    "cache_dtype": "float32",
}

_PLACEHOLDER = re.compile(r"^( *)\$(\w+)$", re.MULTILINE)


def entry_names(block: str) -> list[str]:
    """The names a numpydoc block documents (``"name : type"`` lines), in order."""
    return re.findall(r"^(\w+) :", block, re.MULTILINE)


#: every parameter the three classes share
SHARED_PARAMETERS: tuple[str, ...] = tuple(entry_names(MODEL_PARAMETERS) + entry_names(RUN_PARAMETERS))


def shared_docs(cls: type) -> type:
    """Class decorator: write the shared entries into ``cls.__doc__`` at its ``$block`` lines."""
    if cls.__doc__:
        cls.__doc__ = _PLACEHOLDER.sub(_indented, cls.__doc__)
    return cls


def _indented(match: re.Match) -> str:
    indent, name = match.groups()
    if name not in _BLOCKS:
        raise KeyError(f"${name} names no shared docstring block; expected one of {', '.join(_BLOCKS)}")
    return "\n".join(indent + line if line else line for line in _BLOCKS[name].rstrip("\n").split("\n"))


def store_parameters(estimator, arguments: dict) -> None:
    """scikit-learn's ``__init__``: store every argument of ``type(estimator).__init__`` under its
    own name (``arguments`` is that ``__init__``'s ``locals()``), and nothing else."""
    for name in inspect.signature(type(estimator).__init__).parameters:
        if name != "self":
            setattr(estimator, name, arguments[name])


__all__ = ["FITTED_ATTRIBUTES", "MODEL_PARAMETERS", "RUN_PARAMETERS", "SHARED_DEFAULTS", "SHARED_PARAMETERS",
           "TAGGER_PARAMETERS",
           "entry_names", "shared_docs", "store_parameters"]
