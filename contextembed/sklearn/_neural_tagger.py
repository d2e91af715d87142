"""BiLSTMCRFTagger: a BiLSTM-CRF sequence tagger trained on frozen encoder features.

The feature-based setting of the BERT paper's Table 7 and of ELMo's NER: the encoders stay frozen,
their layers are encoded once (cached like every contextembed estimator), and a BiLSTM with a
linear-chain CRF is trained on them, the scalar mix of each encoder learned jointly with it.
"""

from __future__ import annotations

import copy
import logging
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, replace
from typing import Literal, Optional, Union

import numpy as np
import torch
from sklearn.base import BaseEstimator
from sklearn.utils.validation import check_is_fitted

from .._inputs.bounds import LEARNING_RATE, check_settings
from .._runtime.devices import resolve_device
from ..heads._bilstm_crf import BiLSTMCRF, TaggerBatch, TaggerSettings, TaggerShape
from ..heads._crf import allowed_transitions
from ..plotting import LayerWeights, estimator_name, layer_labels
from ._base import FRACTION, check_flag, check_random_state, checks_n_threads, draw_seed, head_threads
from ._checks import DocIds, TokenLists, check_doc_ids, check_tagged, check_token_lists
from ._encoding import LayerRows
from ._parameters import shared_docs
from ._progress import bar
from ._tagger_features import SHAPE_NAMES, shape_features, word_shape
from ._scoring import EntityScoresMixin, detect_scheme, entity_f1
from ._tagger import _resolve_shape, with_progress
from ._token import TokenEmbedder

logger = logging.getLogger(__name__)

#: characters of a word the character CNN reads
MAX_CHARS = 20
#: the widest layer a parameter may ask for (hidden_size, shape_dim, char_dim, projection): beyond it a tagger's
#: weights would not fit in memory, and torch's own error would not name the parameter
MAX_WIDTH = 1 << 16
#: the tagger's rates (the library's: no command-line flag to name)
RATE_BOUNDS = {"dropout": FRACTION, "word_dropout": FRACTION, "validation_fraction": FRACTION,
               "learning_rate": replace(LEARNING_RATE, flag="")}
_PAD, _UNKNOWN = 0, 1


@shared_docs
class BiLSTMCRFTagger(EntityScoresMixin, BaseEstimator):
    """Tag every token with a BiLSTM-CRF on frozen encoder features.

    Parameters
    ----------
    embedder : TokenEmbedder or list of TokenEmbedder, optional
        The frozen features. A list stacks encoders (e.g. MiniLM and GloVe, like flair's
        StackedEmbeddings): each one's layers are pooled by its own ``layers``/``combine`` and the
        results concatenated. ``combine="scalar_mix"`` is learned jointly with the tagger.
        Default: ``TokenEmbedder("minilm-l6", layers=[-4, -3, -2, -1], combine="concat")``.
    shape_features : bool or "auto"
        Add word-shape flags and a learned embedding of each word's compact shape (``"Xx"``,
        ``"d-d"``; :func:`contextembed.sklearn.feature_extraction.word_shape`); ``"auto"``: when an encoder is
        uncased.
    shape_dim : int
        Width of the word-shape embedding.
    char_dim : int
        Width of a character CNN over each word's first 20 characters (0: none).
    hidden_size, num_layers : int
        Size and depth of the BiLSTM (the BERT paper's tagger: 768 and 2).
    dropout, word_dropout : float
        Dropout on the features and the LSTM output; probability of dropping a whole word.
    projection : int, optional
        Project the features to this width before the LSTM (cheaper on wide concatenations).
    crf : bool
        A linear-chain CRF whose invalid moves (for the tag scheme of ``y``) are forbidden; else a
        softmax per token.
    max_epochs, batch_size, learning_rate, patience : int, int, float, int
        Adam on sentence batches; training stops when the entity F1 of the held-out sentences has
        not improved for ``patience`` epochs, and the best epoch's weights are kept.
    validation_fraction : float
        Share of training sentences held out for early stopping.
    device : str
        Where the tagger trains and runs (``"auto"``: CUDA when present), resolved where each call
        runs: a tagger trained on a GPU predicts on a CPU-only machine with ``"auto"``.
    random_state : int, RandomState or None
        Seeds the held-out split, the initialisation, batch order and dropout: an int (0 to
        2**32 - 1) trains the same tagger every fit; ``None`` a new one each fit; a
        ``numpy.random.RandomState`` draws each fit's seed from it (a sequence of fits is
        reproducible from the state's own seed).
    show_progress : bool
        Progress bars on stderr: the embedders' (the sentences they encode; ``True`` turns them on
        in the fitted ``embedders_``) and one over the training epochs, with the last batch's loss
        and the held-out entity F1.
    $tagger_parameters

    Attributes
    ----------
    embedders_ : list of TokenEmbedder
    classes_ : np.ndarray
        Tags seen in training; predictions are always among them.
    tag_scheme_ : {"IO", "IOB1", "IOB2", "IOBES", "BILOU"}
    uses_shape_ : bool
    settings_ : dict
        The network's settings (``hidden_size``, ``num_layers``, ``projection``, ``crf``, ...) as
        trained; ``predict`` rebuilds the network from them, so a ``set_params`` after ``fit``
        takes effect at the next ``fit``.
    device_ : str
        Where it trained (``predict`` runs where ``device`` resolves on the machine it runs on).
    mix_weights_ : list of np.ndarray or None
        The learned mix of each embedder (``None`` where its combine is fixed); plot them with
        :func:`contextembed.plotting.plot_layer_weights`.
    mix_gammas_ : list of float or None
        The learned scale of each embedder's mix (``None`` where there is no mix).
    n_epochs_, best_epoch_ : int
    validation_f1_ : float
        Entity F1 of the held-out sentences at the best epoch.

    :meth:`score` gives the entity-level micro F1, :meth:`report` the scores per entity type.
    """

    def __init__(
        self,
        embedder: Optional[Union[TokenEmbedder, Sequence[TokenEmbedder]]] = None,
        shape_features: Union[bool, Literal["auto"]] = "auto",
        shape_dim: int = 16,
        char_dim: int = 0,
        hidden_size: int = 256,
        num_layers: int = 1,
        dropout: float = 0.5,
        word_dropout: float = 0.05,
        projection: Optional[int] = None,
        crf: bool = True,
        max_epochs: int = 30,
        batch_size: int = 32,
        learning_rate: float = 1e-3,
        patience: int = 4,
        validation_fraction: float = 0.1,
        device: str = "auto",
        random_state: Optional[Union[int, np.random.RandomState]] = 0,
        show_progress: bool = False,
        n_threads: Optional[int] = None,
    ) -> None:
        self.embedder = embedder
        self.shape_features = shape_features
        self.shape_dim = shape_dim
        self.char_dim = char_dim
        self.hidden_size = hidden_size
        self.num_layers = num_layers
        self.dropout = dropout
        self.word_dropout = word_dropout
        self.projection = projection
        self.crf = crf
        self.max_epochs = max_epochs
        self.batch_size = batch_size
        self.learning_rate = learning_rate
        self.patience = patience
        self.validation_fraction = validation_fraction
        self.device = device
        self.random_state = random_state
        self.show_progress = show_progress
        self.n_threads = n_threads

    # -- fitting --------------------------------------------------------------------------------

    @checks_n_threads
    def fit(self, X, y, doc_ids=None):
        """Train on tokenized sentences ``X`` and one tag list per sentence ``y``.

        ``doc_ids``: one document id per sentence, handed to every embedder (it matters with their
        ``context``: :class:`TokenEmbedder`); without it ``X``'s order is one document.
        """
        sentences, codes, documents = self._training_data(X, y, doc_ids)
        self.embedders_ = [with_progress(e, self.show_progress).fit(sentences, doc_ids=documents)
                           for e in self._embedders()]
        self.uses_shape_ = any(_resolve_shape(self.shape_features, e.encoder_) for e in self.embedders_)
        self.shape_vocab_ = _vocabulary(word_shape(w) for s in sentences for w in s) if self.uses_shape_ else {}
        self.char_vocab_ = _vocabulary(c for s in sentences for w in s for c in w[:MAX_CHARS]) if self.char_dim else {}
        self.settings_ = asdict(self._settings())
        self.device_ = str(resolve_device(self.device))
        logger.info("BiLSTMCRFTagger trains on %s%s", self.device_, " (auto)" if self.device == "auto" else "")
        data = self._inputs(sentences, documents)
        seed = draw_seed(self.random_state)
        train, valid = _split(len(sentences), self.validation_fraction, seed)
        with head_threads(self):  # the encoding above keeps the process's threads
            torch.manual_seed(seed)
            model = self._build().to(self.device_)
            best = self._train(model, data, codes, train, valid, seed)
        self.model_state_ = {name: value.cpu().numpy() for name, value in best.items()}
        self._model = None
        self._set_mix_attributes()
        return self

    def _training_data(self, X, y, doc_ids) -> tuple[TokenLists, list[np.ndarray], Optional[DocIds]]:
        sentences, y, tags = check_tagged(X, y, "BiLSTMCRFTagger")
        documents = check_doc_ids(doc_ids, len(sentences))
        self._check_params()
        self.classes_ = np.unique(tags)
        if len(self.classes_) < 2:
            raise ValueError(f"y holds a single tag {str(self.classes_[0])!r}; a tagger needs at least two")
        self.tag_scheme_ = detect_scheme([list(t) for t in y], names=("y",))
        index = {tag: i for i, tag in enumerate(self.classes_)}
        self.allowed_ = allowed_transitions(list(self.classes_), self.tag_scheme_).numpy()
        codes = [np.array([index[t] for t in tags_i], dtype=np.int64) for tags_i in y]
        _check_valid_paths(codes, self.allowed_, self.classes_, self.tag_scheme_)
        # an empty sentence has no rows to learn from (and the LSTM and CRF need one token per row); it
        # gives its neighbours no context either, so leaving it out changes nothing else
        kept = [i for i, sentence in enumerate(sentences) if len(sentence)]
        return sentences.subset(kept), [codes[i] for i in kept], _subset(documents, kept)

    def _embedders(self) -> list[TokenEmbedder]:
        if self.embedder is None:
            return [TokenEmbedder("minilm-l6", layers=[-4, -3, -2, -1], combine="concat")]
        embedders = list(self.embedder) if isinstance(self.embedder, (list, tuple)) else [self.embedder]
        for embedder in embedders:
            if not isinstance(embedder, TokenEmbedder):
                raise TypeError(f"embedder must be a TokenEmbedder or a list of them, got {type(embedder).__name__}")
        if not embedders:
            raise ValueError("embedder=[] gives no features; pass at least one TokenEmbedder")
        return embedders

    def _check_params(self) -> None:
        for name in ("hidden_size", "num_layers", "max_epochs", "batch_size", "patience"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        for name in ("shape_dim", "char_dim"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
                raise ValueError(f"{name} must be an int >= 0, got {value!r}")
        for name in ("hidden_size", "shape_dim", "char_dim"):
            if getattr(self, name) > MAX_WIDTH:
                raise ValueError(f"{name}={getattr(self, name)} is wider than a tagger layer may be (at most "
                                 f"{MAX_WIDTH:,})")
        projection = self.projection
        if projection is not None and (isinstance(projection, bool) or not isinstance(projection, (int, np.integer))
                                       or not 1 <= projection <= MAX_WIDTH):
            raise ValueError(f"projection must be None (no projection) or an int from 1 to {MAX_WIDTH:,}, "
                             f"got {projection!r}")
        check_settings(self, RATE_BOUNDS)
        check_random_state(self.random_state)
        if self.shape_features not in (True, False, "auto"):
            raise ValueError(f"shape_features must be True, False or 'auto', got {self.shape_features!r}")
        check_flag("show_progress", self.show_progress)

    def _settings(self) -> TaggerSettings:
        return TaggerSettings(self.hidden_size, self.num_layers, self.dropout, self.word_dropout, self.projection,
                              self.shape_dim if self.uses_shape_ else 0, self.char_dim, self.crf)

    def _build(self) -> BiLSTMCRF:
        layers = tuple((len(e.layer_indexes_), e.width_, e.combine) for e in self.embedders_)
        shape = TaggerShape(layers, len(SHAPE_NAMES) if self.uses_shape_ else 0,
                            len(self.shape_vocab_) + 2 if self.uses_shape_ else 0,
                            len(self.char_vocab_) + 2 if self.char_dim else 0, len(self.classes_))
        self.shape_ = asdict(shape)
        return BiLSTMCRF(shape, self._fitted_settings(), torch.from_numpy(self.allowed_))

    def _fitted_settings(self) -> TaggerSettings:
        """The settings the network was trained with (:attr:`settings_`; a tagger pickled before
        they were recorded: its parameters)."""
        settings = getattr(self, "settings_", None)
        return self._settings() if settings is None else TaggerSettings(**settings)

    def _train(self, model: BiLSTMCRF, data: "_Inputs", codes: list[np.ndarray], train: np.ndarray, valid: np.ndarray,
               seed: int) -> dict:
        optimizer = torch.optim.Adam(model.parameters(), lr=self.learning_rate)
        rng = np.random.default_rng(seed)
        gold = [[self.classes_[i] for i in codes[s]] for s in valid]
        best_state, best_f1, stale = copy.deepcopy(model.state_dict()), -1.0, 0
        self.n_epochs_ = self.best_epoch_ = 0
        with bar(self.show_progress, "BiLSTM-CRF", "epoch", total=self.max_epochs) as progress:
            for epoch in range(1, self.max_epochs + 1):
                loss = self._train_epoch(model, optimizer, data, codes, _length_batches(train, data.lengths,
                                                                                      self.batch_size, rng))
                f1 = entity_f1(gold, self._decode(model, data, valid, self.device_))
                self.n_epochs_ = epoch
                progress.set_postfix(loss=f"{loss:.3f}", valid_f1=f"{f1:.4f}", refresh=False)
                progress.update()
                if f1 > best_f1 + 1e-4:
                    best_state, best_f1, stale, self.best_epoch_ = copy.deepcopy(model.state_dict()), f1, 0, epoch
                else:
                    stale += 1
                    if stale >= self.patience:
                        break
        self.validation_f1_ = best_f1
        return best_state

    def _train_epoch(self, model: BiLSTMCRF, optimizer, data: "_Inputs", codes: list[np.ndarray], batches) -> float:
        """One pass over the training ``batches``; the last batch's loss."""
        model.train()
        for batch in batches:
            optimizer.zero_grad()
            loss = model.loss(data.batch(batch, self.device_), _padded_tags(codes, batch, self.device_))
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
            optimizer.step()
        return float(loss.detach())

    def _set_mix_attributes(self) -> None:
        weights, gammas = [], []
        for k in range(len(self.embedders_)):
            logits = self.model_state_.get(f"poolings.{k}.mix.weights")
            single = logits is None or logits.size == 1  # one layer: nothing to weigh
            weights.append(None if single else _softmax(logits))
            gammas.append(None if single else float(self.model_state_[f"poolings.{k}.mix.gamma"]))
        self.mix_weights_ = weights
        self.mix_gammas_ = gammas

    def learned_layer_weights(self) -> list[LayerWeights]:
        """The mix each embedder with ``combine="scalar_mix"`` over several layers learned jointly
        with the tagger (for :func:`contextembed.plotting.plot_layer_weights`).

        Raises
        ------
        ValueError
            No embedder learned a mix (every ``combine`` is fixed, or a mix has one layer).
        """
        check_is_fitted(self)
        mixes = [LayerWeights(estimator_name(e, e.encoder), layer_labels(e.layer_indexes_),
                              np.asarray(weights, dtype=np.float64), gamma)
                 for e, weights, gamma in zip(self.embedders_, self.mix_weights_, self._mix_gammas()) if weights is not None]
        if not mixes:
            combines = ", ".join(f"combine={e.combine!r} (layers={e.layers!r})" for e in self.embedders_)
            raise ValueError(f"BiLSTMCRFTagger learned no layer weights: its embedders have {combines}; a "
                             "TokenEmbedder with combine='scalar_mix' over several layers learns them with the tagger")
        return mixes

    def _mix_gammas(self) -> list:
        """``mix_gammas_``, or ``None`` each for a tagger pickled before it was recorded."""
        return getattr(self, "mix_gammas_", [None] * len(self.embedders_))

    # -- predicting -----------------------------------------------------------------------------

    @checks_n_threads
    def predict(self, X, doc_ids=None) -> list[list[str]]:
        """Tags for every token: one list per sentence, ``len`` equal to the sentence's (``doc_ids``:
        one document id per sentence, as in :meth:`fit`)."""
        check_is_fitted(self)
        sentences = check_token_lists(X)
        documents = check_doc_ids(doc_ids, len(sentences))
        non_empty = np.array([i for i, s in enumerate(sentences) if len(s)], dtype=np.int64)
        out: list[list[str]] = [[] for _ in sentences]
        if len(non_empty):
            data = self._inputs(sentences.subset(non_empty), _subset(documents, non_empty))
            device = str(resolve_device(self.device))  # here, not where it trained (device_)
            with head_threads(self):
                paths = self._decode(self._module().to(device), data, np.arange(len(non_empty)), device)
            for i, path in zip(non_empty, paths):
                out[i] = path
        return out

    def _decode(self, model: BiLSTMCRF, data: "_Inputs", rows: np.ndarray, device: str,
                batch_size: int = 256) -> list[list[str]]:
        model.eval()
        paths = []
        order = rows[np.argsort([data.lengths[r] for r in rows], kind="stable")]
        for batch in _decode_batches(order, data.lengths, batch_size, data.token_bytes):
            paths.extend(model.decode(data.batch(batch, device)))
        by_row = dict(zip(order.tolist(), paths))
        return [[str(self.classes_[i]) for i in by_row[r]] for r in rows.tolist()]

    def _module(self) -> BiLSTMCRF:
        """The fitted torch module, rebuilt from :attr:`model_state_` (plain arrays, on the CPU) and
        :attr:`settings_` on first use; the caller moves it where it runs."""
        if getattr(self, "_model", None) is None:
            shape = self.shape_
            model = BiLSTMCRF(TaggerShape(tuple(tuple(x) for x in shape["layers"]), shape["n_extra"], shape["n_shapes"],
                                          shape["n_chars"], shape["n_tags"]), self._fitted_settings(),
                              torch.from_numpy(self.allowed_))
            model.load_state_dict({k: torch.from_numpy(np.array(v)) for k, v in self.model_state_.items()})
            self._model = model.eval()
        return self._model

    def _inputs(self, sentences: TokenLists, documents: Optional[DocIds]) -> "_Inputs":
        # each embedder's selected layers, read from the feature store a batch at a time
        layers = [e.layer_rows(sentences, doc_ids=documents) for e in self.embedders_]
        lengths = np.array([len(s) for s in sentences], dtype=np.int64)
        extra = torch.from_numpy(shape_features(sentences)) if self.uses_shape_ else None
        shapes = chars = None
        if self.uses_shape_:
            shapes = torch.tensor([self.shape_vocab_.get(word_shape(w), _UNKNOWN) for s in sentences for w in s], dtype=torch.int64)
        if self._fitted_settings().char_dim:
            chars = torch.zeros(int(lengths.sum()), MAX_CHARS, dtype=torch.int64)
            for row, word in enumerate(w for s in sentences for w in s):
                ids = [self.char_vocab_.get(c, _UNKNOWN) for c in word[:MAX_CHARS]]
                chars[row, : len(ids)] = torch.tensor(ids, dtype=torch.int64)
        return _Inputs(layers, lengths, np.concatenate([[0], np.cumsum(lengths)]), extra, shapes, chars)

    # -- scikit-learn protocol ------------------------------------------------------------------

    def __getstate__(self):
        state = dict(super().__getstate__())
        state.pop("_model", None)  # rebuilt from model_state_ (plain arrays) on first use
        return state

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.string = True
        tags.input_tags.two_d_array = True
        tags.target_tags.required = True
        return tags

    def __sklearn_is_fitted__(self) -> bool:
        return hasattr(self, "model_state_")


class _Inputs:
    """The tagger's per-token inputs of a set of sentences, flat; :meth:`batch` pads a subset."""

    def __init__(self, layers, lengths, offsets, extra, shapes, chars) -> None:
        self.layers, self.lengths, self.offsets = layers, lengths, offsets
        self.extra, self.shapes, self.chars = extra, shapes, chars

    @property
    def token_bytes(self) -> int:
        """Bytes of one padded position's layers in a batch (float32, every embedder's)."""
        return sum(rows.row_bytes for rows in self.layers)

    def batch(self, rows: np.ndarray, device: str) -> TaggerBatch:
        lengths = self.lengths[rows]
        seq = int(lengths.max())
        # (batch, seq) flat token rows; padding points at row 0 and is masked
        positions = self.offsets[rows][:, None] + np.arange(seq)[None]
        mask = np.arange(seq)[None] < lengths[:, None]
        index = torch.from_numpy(np.where(mask, positions, 0).reshape(-1))

        def take(flat: Optional[torch.Tensor], axis: int = 0) -> Optional[torch.Tensor]:
            if flat is None:
                return None
            picked = flat.index_select(axis, index)
            shape = (*flat.shape[:axis], len(rows), seq, *flat.shape[axis + 1 :])
            return picked.reshape(shape).to(device)

        return TaggerBatch([self._layers(layers, index.numpy(), (len(rows), seq), device) for layers in self.layers],
                           torch.from_numpy(mask).to(device), take(self.extra), take(self.shapes), take(self.chars))

    @staticmethod
    def _layers(rows: LayerRows, index: np.ndarray, shape: tuple[int, int], device: str) -> torch.Tensor:
        """``(layers, batch, seq, width)`` float32 of the flat token rows ``index``."""
        # (layers, batch * seq, width)
        picked = rows.take(index)
        if not bool(torch.isfinite(picked).all()):
            raise FloatingPointError("an encoder produced NaN or inf features; use precision='fp32'")
        return picked.reshape(picked.shape[0], *shape, picked.shape[-1]).to(device)


#: bytes of layers one decoding batch holds at most (its padded positions x their layers' widths):
#: 256 sentences of 124 words with every layer of a base-sized model would take 1.3 GB
DECODE_BYTES = 64 << 20


def _decode_batches(order: np.ndarray, lengths: np.ndarray, batch_size: int, token_bytes: int) -> list[np.ndarray]:
    """``order`` (sorted by length) cut into batches of at most ``batch_size`` sentences whose padded
    layers fit :data:`DECODE_BYTES` (a sentence longer than that alone is a batch of its own)."""
    batches, begin = [], 0
    while begin < len(order):
        end = begin + 1
        while (end < len(order) and end - begin < batch_size
               and (end - begin + 1) * int(lengths[order[end]]) * token_bytes <= DECODE_BYTES):
            end += 1
        batches.append(order[begin:end])
        begin = end
    return batches


def _padded_tags(codes: list[np.ndarray], rows: np.ndarray, device: str) -> torch.Tensor:
    seq = max(len(codes[r]) for r in rows)
    tags = np.zeros((len(rows), seq), dtype=np.int64)
    for i, r in enumerate(rows):
        tags[i, : len(codes[r])] = codes[r]
    return torch.from_numpy(tags).to(device)


#: batches per pool of sentences sorted by length (see :func:`_length_batches`)
POOL_BATCHES = 20


def _length_batches(rows: np.ndarray, lengths: np.ndarray, batch_size: int, rng: np.random.Generator) -> list[np.ndarray]:
    """One epoch's batches: shuffled, then sorted by length within pools of :data:`POOL_BATCHES`
    batches, so a batch holds sentences of similar length (little padding) while batch contents and
    order still change every epoch."""
    order = rows[rng.permutation(len(rows))]
    pool = POOL_BATCHES * batch_size
    batches = []
    for begin in range(0, len(order), pool):
        chunk = order[begin : begin + pool]
        chunk = chunk[np.argsort(lengths[chunk], kind="stable")]
        batches.extend(chunk[i : i + batch_size] for i in range(0, len(chunk), batch_size))
    return [batches[i] for i in rng.permutation(len(batches))]


def _softmax(logits: np.ndarray) -> np.ndarray:
    """``exp(w) / sum(exp(w))``, shifted by the largest logit (large logits overflowed to NaN weights)."""
    shifted = np.exp(logits - logits.max())
    return shifted / shifted.sum()


def _subset(documents: Optional[DocIds], rows) -> Optional[DocIds]:
    return None if documents is None else documents.subset(rows)


def _vocabulary(items, limit: int = 1000) -> dict[str, int]:
    """The ``limit`` most frequent items, numbered from 2 (0: padding, 1: unknown)."""
    return {item: i for i, (item, _) in enumerate(Counter(items).most_common(limit), start=2)}


def _split(n: int, fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Training and held-out sentence rows; too few sentences: validate on the training ones."""
    order = np.random.default_rng(seed).permutation(n)
    n_valid = int(round(fraction * n))
    if n < 2 or n_valid == 0:
        return order, order
    return order[n_valid:], order[:n_valid]


def _check_valid_paths(codes: list[np.ndarray], allowed: np.ndarray, classes: np.ndarray, scheme: str) -> None:
    """Gold tag sequences must be valid in their scheme (a CRF cannot learn a forbidden move); an
    empty sentence has no moves."""
    n = len(classes)
    for i, sentence in enumerate(codes):
        if not len(sentence):
            continue
        previous = n  # start
        for j, tag in enumerate(sentence.tolist() + [n + 1]):
            if not allowed[previous, tag]:
                where = "the start" if previous == n else repr(str(classes[previous]))
                what = "the end" if tag == n + 1 else repr(str(classes[tag]))
                raise ValueError(f"sentence {i}, token {j}: {what} cannot follow {where} in {scheme} tags; fix the tags "
                                 "or their scheme")
            previous = tag


__all__ = ["BiLSTMCRFTagger"]
