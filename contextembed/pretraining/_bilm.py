"""ELMo-style pretraining: a forward and a backward language model over one char-CNN + biLSTM encoder.

The encoder is :class:`contextembed.encoders._elmo.BiLMEncoderModule` (the architecture the ELMo
encoder loads), sized by the ELMo presets. Words are corpus lines split on white space; every
sentence is wrapped in ``<S>`` ... ``</S>``. At position ``t`` the top forward layer predicts token
``t + 1`` and the top backward layer token ``t - 1``; both directions share one softmax over a word
vocabulary (``<S>``, ``</S>``, ``<UNK>`` then the words by frequency, as bilm-tf's ``vocab.txt``).
The loss is the mean of the two directions' per-token negative log-likelihoods.

The softmax is a full ``Linear`` layer for small vocabularies and torch's
``AdaptiveLogSoftmaxWithLoss`` (Grave et al. 2017; frequent words in the head, rarer words in
smaller tail clusters) for large ones (``softmax="auto"``: adaptive above 10,000 words).

Sentences longer than ``max_length`` words are cut into consecutive pieces, each its own
``<S>`` ... ``</S>`` example, so no text is dropped (the encoder is stateless across examples).

OUT receives ``options.json`` + ``weights.hdf5`` (AllenNLP's layout, loaded by
:func:`contextembed.load_encoder`), ``vocab.txt`` and ``softmax.safetensors`` (the LM head, not needed
for features).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Optional, Union, get_args

import numpy as np
import torch
import torch.nn.functional as F

from ..encoders._elmo.options import ElmoSize
from .._runtime import json_io as _json
from .._inputs.options import check_choice
from ._corpus import EncodingErrors, check_encoding_errors, split_words
from ._outline import NeuralRecipe, run_objective
from .._inputs.bounds import Bound, check_integers, check_settings
from ._training import Objective, TrainingOptions

#: the output layer (see the module docstring)
Softmax = Literal["auto", "full", "adaptive"]
SOFTMAXES: tuple[str, ...] = get_args(Softmax)
SPECIAL_WORDS = ("<S>", "</S>", "<UNK>")
#: vocabularies larger than this use the adaptive softmax under ``softmax="auto"``
ADAPTIVE_ABOVE = 10_000
IGNORE = -100

#: the numeric settings of :class:`BiLMConfig` (see :mod:`.settings`)
BILM_BOUNDS: dict[str, Bound] = {
    "n_layers": Bound(int, 1, 64, "--n-layers"),
    "max_vocab": Bound(int, 1, 10**8, "--max-vocab"),
    "min_count": Bound(int, 1, 10**9, "--min-count"),
    "max_length": Bound(int, 1, 10**5, "--max-length"),
    "dropout": Bound(float, 0, 1, "--dropout", high_open=True),
}
#: each adaptive-softmax cluster boundary (they must also lie below the vocabulary's size)
CUTOFF = Bound(int, 1, 10**8, "--cutoffs", optional=True)


@dataclass
class BiLMConfig:
    """What to pretrain.

    Attributes
    ----------
    size : {"tiny", "small", "medium", "original"}
        ELMo size preset (:func:`contextembed.encoders.elmo_options` gives each one's sizes).
    n_layers : int
        biLSTM layers.
    init : str, optional
        An ELMo directory (``options.json`` + ``weights.hdf5``) to continue pretraining
        (domain-adaptive pretraining); ``size`` and ``n_layers`` are then ignored. When it also holds
        this trainer's ``vocab.txt`` and ``softmax.safetensors``, the softmax vocabulary and weights are
        reused too; otherwise a vocabulary is built from the corpus and the softmax starts fresh.
    max_vocab : int
        Most frequent words in the softmax vocabulary (others are ``<UNK>``).
    min_count : int
        Words seen fewer times are ``<UNK>``.
    softmax : {"auto", "full", "adaptive"}
        Output layer (see the module docstring).
    cutoffs : list of int, optional
        Adaptive-softmax cluster boundaries (default: those of 2,000 / 10,000 / 50,000 below the
        vocabulary size).
    max_length : int
        Words per example (longer sentences are cut).
    dropout : float
        Dropout on the input of every LSTM layer while training.
    lowercase : bool
        Lowercase the softmax vocabulary's words (the characters the encoder reads keep their case).
    encoding_errors : {"skip", "fail"}
        Lines that are not UTF-8.
    """

    size: ElmoSize = "tiny"
    n_layers: int = 2
    init: Optional[str] = None
    max_vocab: int = 50_000
    min_count: int = 3
    softmax: Softmax = "auto"
    cutoffs: Optional[list[int]] = None
    max_length: int = 50
    dropout: float = 0.1
    lowercase: bool = False
    encoding_errors: EncodingErrors = "skip"
    #: the resolved ELMo options dict (set from ``size`` and ``n_layers``)
    options: dict = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        from ..encoders._elmo import elmo_options

        check_choice("softmax", self.softmax, Softmax)
        check_encoding_errors(self.encoding_errors)
        check_settings(self, BILM_BOUNDS)
        self.cutoffs = check_integers("cutoffs", self.cutoffs, CUTOFF, increasing=True)
        if self.init is not None:
            self.options = _init_options(self.init)
        else:
            self.options = elmo_options(self.size, n_layers=self.n_layers)


def _init_options(directory: str) -> dict:
    """The ``options.json`` of an ELMo directory to continue from (clear errors when it is not one)."""
    from ..encoders._elmo import OPTIONS_FILE, WEIGHTS_FILE, is_elmo_directory, read_options

    if not is_elmo_directory(directory):
        raise ValueError(
            f"init={directory!r} is not an ELMo directory: it must hold {OPTIONS_FILE} and {WEIGHTS_FILE} "
            "(AllenNLP's layout, as `contextembed pretrain bilm` writes)"
        )
    return read_options(os.path.join(directory, OPTIONS_FILE))


def default_learning_rate(config: BiLMConfig) -> float:
    if config.init is not None:
        return 2e-4
    return 1e-3 if config.size == "tiny" else 5e-4


# -- vocabulary ---------------------------------------------------------------------------------


@dataclass
class WordVocabulary:
    """Softmax vocabulary: ``<S>``, ``</S>``, ``<UNK>``, then words by decreasing frequency."""

    words: list[str]
    lowercase: bool = False

    def __post_init__(self) -> None:
        self.index = {w: i for i, w in enumerate(self.words)}
        self.unk = self.index["<UNK>"]

    @classmethod
    def build(cls, sentences: list[list[str]], max_vocab: int, min_count: int, lowercase: bool) -> "WordVocabulary":
        counter = Counter(w.lower() if lowercase else w for sentence in sentences for w in sentence)
        for special in SPECIAL_WORDS:
            counter.pop(special, None)
        kept = [w for w, c in counter.most_common(max_vocab) if c >= min_count]
        return cls([*SPECIAL_WORDS, *kept], lowercase)

    def ids(self, sentence: list[str]) -> list[int]:
        """``[<S>, words..., </S>]`` as ids."""
        words = (w.lower() for w in sentence) if self.lowercase else sentence
        return [0, *(self.index.get(w, self.unk) for w in words), 1]

    @classmethod
    def load(cls, path: Path, lowercase: bool = False) -> "WordVocabulary":
        words = path.read_text(encoding="utf-8").splitlines()
        if tuple(words[:3]) != SPECIAL_WORDS:
            raise ValueError(f"{path} must start with the lines {', '.join(SPECIAL_WORDS)}")
        return cls(words, lowercase)

    def save(self, path: Path) -> None:
        path.write_text("\n".join(self.words) + "\n", encoding="utf-8")


def default_cutoffs(vocab_size: int) -> list[int]:
    cutoffs = [c for c in (2_000, 10_000, 50_000) if c < vocab_size - 1]
    return cutoffs or [max(1, vocab_size // 2)]


# -- model --------------------------------------------------------------------------------------


class BiLMLanguageModel(torch.nn.Module):
    """The ELMo encoder plus a softmax shared by the forward and backward language models."""

    def __init__(self, options: dict, vocab_size: int, *, softmax: Softmax = "auto",
                 cutoffs: Optional[list[int]] = None, dropout: float = 0.1) -> None:
        from ..encoders._elmo import BiLMEncoderModule

        super().__init__()
        self.encoder = BiLMEncoderModule(options, dropout=dropout)
        width = self.encoder.projection_dim
        adaptive = softmax == "adaptive" or (softmax == "auto" and vocab_size > ADAPTIVE_ABOVE)
        self.cutoffs = (cutoffs or default_cutoffs(vocab_size)) if adaptive else None
        if adaptive:
            self.softmax = torch.nn.AdaptiveLogSoftmaxWithLoss(width, vocab_size, self.cutoffs, div_value=4.0)
        else:
            self.softmax = torch.nn.Linear(width, vocab_size)

    def log_prob(self, hidden: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """``(n, width)`` states, ``(n,)`` targets -> ``(n,)`` log-probabilities of the targets."""
        if isinstance(self.softmax, torch.nn.AdaptiveLogSoftmaxWithLoss):
            # in fp32 outside autocast: its output buffer is fp32 and index_copy_ refuses bf16/fp16 rows
            with torch.autocast(device_type=hidden.device.type, enabled=False):
                return self.softmax(hidden.float(), targets).output
        return -F.cross_entropy(self.softmax(hidden).float(), targets, reduction="none")

    def forward(self, char_ids: torch.Tensor, tokens: torch.Tensor):
        """Summed negative log-likelihoods of both directions.

        Parameters
        ----------
        char_ids : torch.Tensor
            ``(batch, seq, 50)`` character ids, markers included, zero-padded.
        tokens : torch.Tensor
            ``(batch, seq)`` vocabulary ids of the same positions, ``-100`` at padding.

        Returns
        -------
        forward_nll, backward_nll : torch.Tensor
            Scalars: sums over the ``count`` predictions of each direction.
        count : torch.Tensor
            Scalar: predictions per direction.
        """
        states = self.encoder(char_ids)
        # (batch, seq - 1): an input position t >= 1 exists, so t - 1 and (from t - 1) t exist
        pairs = tokens[:, 1:] != IGNORE
        # forward: the state at t - 1 predicts token t; backward: the state at t predicts token t - 1
        forward_nll = -self.log_prob(states.forward[-1][:, :-1][pairs], tokens[:, 1:][pairs]).sum()
        backward_nll = -self.log_prob(states.backward[-1][:, 1:][pairs], tokens[:, :-1][pairs]).sum()
        return forward_nll, backward_nll, pairs.sum()


# -- examples -----------------------------------------------------------------------------------


def cut_sentences(sentences: list[list[str]], max_length: int) -> list[list[str]]:
    """Cut sentences longer than ``max_length`` words into consecutive pieces (empty ones dropped)."""
    return [s[i : i + max_length] for s in sentences for i in range(0, len(s), max_length)]


class BiLMObjective(Objective):
    """Sentence (piece) examples and the bidirectional LM loss."""

    def __init__(self, train_sentences, held_sentences, vocabulary: WordVocabulary, config: BiLMConfig,
                 fingerprint: dict) -> None:
        self.train = cut_sentences(train_sentences, config.max_length)
        self.held = cut_sentences(held_sentences, config.max_length)
        if not self.train:
            raise ValueError("the corpus gives no training sentence")
        self.vocabulary, self._fingerprint = vocabulary, fingerprint

    def n_examples(self) -> int:
        return len(self.train)

    def make_batch(self, epoch, indexes, generator):
        return self._collate([self.train[i] for i in indexes])

    def held_out_batches(self, batch_size: int):
        return [self._collate(self.held[i : i + batch_size]) for i in range(0, len(self.held), batch_size)]

    def _collate(self, sentences: list[list[str]]):
        from ..encoders._elmo import sentence_char_ids

        char_ids, lengths = sentence_char_ids(sentences)
        tokens = torch.full(char_ids.shape[:2], IGNORE, dtype=torch.long)
        for row, sentence in enumerate(sentences):
            tokens[row, : lengths[row]] = torch.tensor(self.vocabulary.ids(sentence))
        return {"char_ids": torch.from_numpy(char_ids), "tokens": tokens}

    def loss(self, model, batch):
        forward_nll, backward_nll, count = model(batch["char_ids"], batch["tokens"])
        n = max(1, int(count))
        loss = (forward_nll + backward_nll) / (2 * n)
        stats = {"forward_loss_sum": float(forward_nll.detach()), "forward_loss_count": n,
                 "backward_loss_sum": float(backward_nll.detach()), "backward_loss_count": n,
                 "tokens": float((batch["tokens"] != IGNORE).sum())}
        return loss, stats

    def fingerprint(self) -> dict:
        return self._fingerprint


def _fingerprint(config: BiLMConfig, vocabulary: WordVocabulary, model: BiLMLanguageModel) -> dict:
    digest = hashlib.sha1("\n".join(vocabulary.words).encode("utf-8")).hexdigest()
    return {"objective": "bilm", "options": json.dumps(config.options, sort_keys=True),
            "vocabulary_sha1": digest, "vocab_size": len(vocabulary.words),
            "softmax": type(model.softmax).__name__, "cutoffs": model.cutoffs}


def _check_cutoffs(cutoffs: Optional[list[int]], softmax: str, vocab_size: int) -> None:
    """Cutoffs an adaptive softmax over ``vocab_size`` words will use must lie below it."""
    adaptive = softmax == "adaptive" or (softmax == "auto" and vocab_size > ADAPTIVE_ABOVE)
    if adaptive and cutoffs and max(cutoffs) > vocab_size - 1:
        raise ValueError(f"cutoffs={cutoffs} (--cutoffs): every boundary must be at most the vocabulary's size minus "
                         f"one ({vocab_size - 1}, from the corpus and --max-vocab); pass smaller cutoffs")


def _saved_cutoffs(head: Path) -> Optional[list[int]]:
    """The adaptive softmax's cutoffs recorded in the LM head file ``head`` (``None``: a full
    softmax), checked as ``--cutoffs`` is; else :class:`~contextembed.errors.ModelFormatError` naming it."""
    from safetensors import safe_open

    from ..errors import ModelFormatError

    with safe_open(str(head), framework="pt") as handle:
        text = (handle.metadata() or {}).get("cutoffs", "null")
    try:
        return check_integers("cutoffs", _json.loads(text, max_bytes=1 << 16), CUTOFF, increasing=True)
    except (TypeError, ValueError) as error:
        raise ModelFormatError(f"the recorded cutoffs {text[:80]!r} are unusable ({error}); save the model again",
                               path=head) from None


def build_model(config: BiLMConfig, sentences: list[list[str]]) -> tuple[BiLMLanguageModel, WordVocabulary]:
    """A fresh model and a corpus vocabulary, or the ``init`` encoder (and its LM head, when saved)."""
    from ..encoders._elmo import load_bilm

    head = Path(config.init, "softmax.safetensors") if config.init else None
    if head is not None and head.is_file() and Path(config.init, "vocab.txt").is_file():
        vocabulary = WordVocabulary.load(Path(config.init, "vocab.txt"), config.lowercase)
    else:
        head = None
        vocabulary = WordVocabulary.build(sentences, config.max_vocab, config.min_count, config.lowercase)
    cutoffs = config.cutoffs
    if head is not None:
        cutoffs = _saved_cutoffs(head) or cutoffs
    softmax = ("adaptive" if cutoffs else "full") if head is not None else config.softmax
    _check_cutoffs(cutoffs, softmax, len(vocabulary.words))
    model = BiLMLanguageModel(config.options, len(vocabulary.words), softmax=softmax, cutoffs=cutoffs,
                              dropout=config.dropout)
    if config.init is not None:
        model.encoder.load_state_dict(load_bilm(config.init).state_dict())
    if head is not None:
        from safetensors.torch import load_file

        model.softmax.load_state_dict(load_file(str(head)))
    return model, vocabulary


# -- entry point --------------------------------------------------------------------------------


class BiLMRecipe(NeuralRecipe):
    """The ELMo-style biLM in the outline of :func:`~.outline.run_objective`."""

    name = "bilm"

    def __init__(self, config: BiLMConfig, training: Optional[TrainingOptions] = None) -> None:
        super().__init__(config, training or TrainingOptions(learning_rate=default_learning_rate(config)))
        self.vocabulary: Optional[WordVocabulary] = None

    def encode(self, documents) -> list[list[str]]:
        return [split_words(sentence) for document in documents for sentence in document]

    def build(self, train, held) -> None:
        self.module, self.vocabulary = build_model(self.config, train)
        self.objective = BiLMObjective(train, held, self.vocabulary, self.config,
                                       _fingerprint(self.config, self.vocabulary, self.module))

    def save(self, folder: Path) -> None:
        _save(self.module, self.vocabulary, folder)

    def summary(self, result: dict) -> dict:
        """Adds the held-out ``perplexity``: exp of the mean of the two directions' losses."""
        held_out = result["held_out"]
        if held_out:
            held_out["perplexity"] = float(np.exp((held_out["forward_loss"] + held_out["backward_loss"]) / 2))
        return result


def pretrain_bilm(
    corpus: Union[str, os.PathLike],
    out: Union[str, os.PathLike],
    config: Optional[BiLMConfig] = None,
    training: Optional[TrainingOptions] = None,
    *,
    overwrite: bool = False,
    resume: Union[bool, str, os.PathLike] = False,
) -> dict:
    """Pretrain an ELMo-style biLM and save it in AllenNLP's options.json + weights.hdf5 layout.

    Parameters
    ----------
    corpus : str or path
        Text file or directory: one sentence per line, a blank line between documents.
    out : str or path
        Output directory (see the module docstring); :func:`contextembed.load_encoder` loads it.
    config : BiLMConfig
        Architecture, vocabulary and softmax.
    training : TrainingOptions
        Optimisation settings (``batch_size`` counts sentences; default: the learning rate of
        :func:`default_learning_rate`).
    overwrite, resume
        As in :func:`contextembed.pretraining.pretrain_mlm`.

    Returns
    -------
    dict
        ``steps``, ``held_out_before`` and ``held_out`` (``forward_loss``, ``backward_loss``, ...).
    """
    recipe = BiLMRecipe(config or BiLMConfig(), training)
    return run_objective(recipe, corpus, out, overwrite=overwrite, resume=resume)


def _save(model: BiLMLanguageModel, vocabulary: WordVocabulary, out: Path) -> None:
    """The encoder in AllenNLP's layout, ``vocab.txt`` and the LM head (``softmax.safetensors``)."""
    from safetensors.torch import save_file

    from ..encoders._elmo.encoder import write_bilm

    model.encoder.to("cpu", torch.float32)
    write_bilm(model.encoder, os.fspath(out))
    vocabulary.save(out / "vocab.txt")
    head = {k: v.detach().float().cpu().contiguous() for k, v in model.softmax.state_dict().items()}
    save_file(head, str(out / "softmax.safetensors"),
              metadata={"kind": type(model.softmax).__name__, "cutoffs": json.dumps(model.cutoffs)})
