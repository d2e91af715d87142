"""Static word vectors: skip-gram or CBOW with negative sampling (Mikolov et al. 2013), in torch.

Words are the corpus lines split on white space (optionally lowercased). As in word2vec: words
seen fewer than ``min_count`` times are removed before windows are formed; frequent words are
subsampled anew every epoch (keep probability ``(sqrt(f / t) + 1) * t / f`` for a word of relative
frequency ``f`` and threshold ``t = sample``); every centre word draws a reduced window ``b`` uniform
in ``1..window``; negatives come from the unigram distribution raised to 3/4; input vectors start
uniform in ``±0.5 / dim`` and output vectors at zero; plain SGD on sparse gradients with a learning
rate that decays linearly to ``learning_rate * 1e-4``. Windows never cross a sentence boundary.

The result is written as ``vectors.txt`` (word2vec text) and ``vectors.bin`` (word2vec binary),
both readable by :func:`contextembed.load_encoder` and gensim's ``KeyedVectors.load_word2vec_format``.
"""

from __future__ import annotations

import math
import os
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal, Optional, Union, get_args

import numpy as np
import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from .._runtime.devices import resolve_device
from ..encoders._static.vectors import write_word2vec
from .._inputs.options import check_choice
from ._corpus import EncodingErrors, check_encoding_errors, split_words
from ._distributed import DistributedContext
from ._outline import Recipe, Run, run_objective
from ._run_files import RunLog
from .._inputs.bounds import LEARNING_RATE, SEED, Bound, check_settings
from ._training import TrainingDivergedError, nonfinite_parameters

Architecture = Literal["skipgram", "cbow"]
ARCHITECTURES: tuple[str, ...] = get_args(Architecture)
#: word2vec's initial learning rate of each architecture (``StaticConfig.learning_rate=None``)
DEFAULT_LEARNING_RATES: dict[Architecture, float] = {"skipgram": 0.025, "cbow": 0.05}
#: the learning rate decays linearly to this share of its initial value over the run (word2vec)
MIN_LEARNING_RATE_FACTOR = 1e-4
#: negatives are drawn from the unigram distribution raised to this power (word2vec)
NOISE_POWER = 0.75
#: the files written into OUT: word2vec text and binary
TEXT_FILE, BINARY_FILE = "vectors.txt", "vectors.bin"

#: the numeric settings of :class:`StaticConfig` (see :mod:`.settings`)
STATIC_BOUNDS: dict[str, Bound] = {
    "dim": Bound(int, 1, 10**4, "--dim"),
    "window": Bound(int, 1, 100, "--window"),
    "negative": Bound(int, 1, 100, "--negative"),
    "min_count": Bound(int, 1, 10**9, "--min-count"),
    "max_vocab": Bound(int, 1, 10**9, "--max-vocab", optional=True),
    "sample": Bound(float, 0, 1, "--sample", note="0: no subsampling"),
    "epochs": Bound(int, 1, 10**4, "--epochs"),
    "batch_size": Bound(int, 1, 2**20, "--batch-size"),
    "learning_rate": Bound(float, LEARNING_RATE.low, LEARNING_RATE.high, "--lr", low_open=True, optional=True,
                           note="None: word2vec's default for the architecture"),
    "seed": SEED,
}


@dataclass
class StaticConfig:
    """Settings of :func:`pretrain_static` (word2vec's defaults where it has one)."""

    architecture: Architecture = "skipgram"
    dim: int = 100
    window: int = 5
    negative: int = 5
    min_count: int = 5
    max_vocab: Optional[int] = None
    sample: float = 1e-3
    epochs: int = 5
    batch_size: int = 1024
    learning_rate: Optional[float] = None
    lowercase: bool = False
    seed: int = 0
    device: str = "auto"
    encoding_errors: EncodingErrors = "skip"
    show_progress: bool = True

    def __post_init__(self) -> None:
        check_choice("architecture", self.architecture, Architecture)
        check_encoding_errors(self.encoding_errors)
        check_settings(self, STATIC_BOUNDS)

    @property
    def lr(self) -> float:
        """``learning_rate``, or word2vec's default for the architecture (:data:`DEFAULT_LEARNING_RATES`)."""
        if self.learning_rate is not None:
            return self.learning_rate
        return DEFAULT_LEARNING_RATES[self.architecture]


@dataclass
class Vocabulary:
    """Words kept (most frequent first) and their counts."""

    words: list[str]
    counts: np.ndarray

    @classmethod
    def build(cls, sentences: list[list[str]], min_count: int, max_vocab: Optional[int]) -> "Vocabulary":
        counter = Counter(word for sentence in sentences for word in sentence)
        kept = [(w, c) for w, c in counter.most_common(max_vocab) if c >= min_count]
        if not kept:
            raise ValueError(
                f"no word occurs at least min_count={min_count} times in the corpus "
                f"({len(counter)} distinct words, the most frequent {counter.most_common(1)}); lower --min-count"
            )
        return cls([w for w, _ in kept], np.array([c for _, c in kept], dtype=np.int64))


def encode_sentences(sentences: list[list[str]], vocabulary: Vocabulary) -> tuple[np.ndarray, np.ndarray]:
    """Ids of in-vocabulary words, concatenated, and the sentence number of each.

    Returns
    -------
    ids : np.ndarray
        ``(tokens,)`` int64.
    sentence_of : np.ndarray
        ``(tokens,)`` int64.
    """
    index = {w: i for i, w in enumerate(vocabulary.words)}
    ids, owners = [], []
    for number, sentence in enumerate(sentences):
        row = [index[w] for w in sentence if w in index]
        ids.extend(row)
        owners.extend([number] * len(row))
    return np.asarray(ids, dtype=np.int64), np.asarray(owners, dtype=np.int64)


def keep_probabilities(counts: np.ndarray, sample: float) -> np.ndarray:
    """word2vec's subsampling: ``(sqrt(f / t) + 1) * t / f`` capped at 1 (``t = sample``; 0: keep all)."""
    if sample == 0:
        return np.ones(len(counts))
    frequency = counts / counts.sum()
    return np.minimum(1.0, (np.sqrt(frequency / sample) + 1) * sample / frequency)


def skipgram_pairs(ids: np.ndarray, sentence_of: np.ndarray, reduced: np.ndarray):
    """(centre, context) pairs within each centre's reduced window, never across sentences.

    ``reduced`` is ``(tokens,)``: the window of each centre (word2vec draws it uniform in ``1..window``).

    Returns
    -------
    centres, contexts : np.ndarray
        ``(pairs,)`` int64 ids.
    """
    centres, contexts = [ids[:0]], [ids[:0]]
    for distance in range(1, int(reduced.max(initial=0)) + 1):
        left, right = np.arange(len(ids) - distance), np.arange(distance, len(ids))
        same = sentence_of[left] == sentence_of[right]
        forward = same & (reduced[left] >= distance)  # centre left, context right
        backward = same & (reduced[right] >= distance)  # centre right, context left
        centres += [ids[left[forward]], ids[right[backward]]]
        contexts += [ids[right[forward]], ids[left[backward]]]
    return np.concatenate(centres), np.concatenate(contexts)


def cbow_windows(ids: np.ndarray, sentence_of: np.ndarray, reduced: np.ndarray, window: int, pad: int):
    """Every centre with its context ids (reduced window, same sentence), padded with ``pad``.

    Context columns are the offsets ``-window..-1, 1..window`` in order.

    Returns
    -------
    centres : np.ndarray
        ``(centres,)`` ids of centres that have at least one context word.
    contexts : np.ndarray
        ``(centres, 2 * window)`` context ids, ``pad`` where there is none.
    """
    n = len(ids)
    contexts = np.full((n, 2 * window), pad, dtype=np.int64)
    positions = np.arange(n)
    for column, offset in enumerate([d for d in range(-window, window + 1) if d != 0]):
        other = positions + offset
        valid = (other >= 0) & (other < n) & (abs(offset) <= reduced)
        valid[valid] &= sentence_of[other[valid]] == sentence_of[positions[valid]]
        contexts[valid, column] = ids[other[valid]]
    has_context = (contexts != pad).any(axis=1)
    return ids[has_context], contexts[has_context]


class WordVectorModel(torch.nn.Module):
    """Input and output embeddings of word2vec (input row ``vocab`` is the CBOW padding, kept at zero)."""

    def __init__(self, vocab_size: int, dim: int) -> None:
        super().__init__()
        self.pad = vocab_size
        self.inputs = torch.nn.Embedding(vocab_size + 1, dim, sparse=True, padding_idx=vocab_size)
        self.outputs = torch.nn.Embedding(vocab_size, dim, sparse=True)
        with torch.no_grad():
            self.inputs.weight.uniform_(-0.5 / dim, 0.5 / dim)
            self.inputs.weight[vocab_size].zero_()
            self.outputs.weight.zero_()

    def forward(self, context: torch.Tensor, target: torch.Tensor, negatives: torch.Tensor) -> torch.Tensor:
        """Summed negative-sampling loss.

        Parameters
        ----------
        context : torch.Tensor
            ``(batch, n_context)`` input ids (skip-gram: ``n_context = 1``), averaged over the
            non-padding ones.
        target : torch.Tensor
            ``(batch,)`` ids to predict.
        negatives : torch.Tensor
            ``(batch, negative)`` noise ids.
        """
        # (batch, n_context, 1) and (batch, dim)
        present = (context != self.pad).unsqueeze(-1)
        hidden = (self.inputs(context) * present).sum(1) / present.sum(1).clamp(min=1)
        # (batch,) and (batch, negative)
        positive = (hidden * self.outputs(target)).sum(-1)
        negative = torch.bmm(self.outputs(negatives), hidden.unsqueeze(-1)).squeeze(-1)
        return -(F.logsigmoid(positive).sum() + F.logsigmoid(-negative).sum())


def _skipgram_examples(ids, sentence_of, reduced, window: int, pad: int) -> tuple[np.ndarray, np.ndarray]:
    """Skip-gram: the centre predicts each context word (context ``(n, 1)``, target ``(n,)``)."""
    centres, contexts = skipgram_pairs(ids, sentence_of, reduced)
    return centres[:, None], contexts


def _cbow_examples(ids, sentence_of, reduced, window: int, pad: int) -> tuple[np.ndarray, np.ndarray]:
    """CBOW: the context words predict the centre (context ``(n, 2 * window)``, target ``(n,)``)."""
    target, context = cbow_windows(ids, sentence_of, reduced, window, pad)
    return context, target


#: how each architecture turns an epoch's tokens into ``(context, target)`` examples
EXAMPLES: dict[Architecture, Callable[..., tuple[np.ndarray, np.ndarray]]] = {
    "skipgram": _skipgram_examples, "cbow": _cbow_examples,
}


@dataclass
class _SGD:
    """What word2vec's loop draws from and updates with."""

    optimizer: torch.optim.SGD
    device: torch.device
    #: ``(vocab,)`` unigram counts raised to :data:`NOISE_POWER`: the negative-sampling weights
    noise: torch.Tensor
    #: negative samples
    generator: torch.Generator
    #: subsampling, reduced windows and example order
    rng: np.random.Generator
    bar: tqdm


class StaticRecipe(Recipe):
    """word2vec in the outline of :func:`~.outline.run_objective`: its own SGD loop, one process,
    nothing held out, no checkpoints."""

    name = "static"

    def __init__(self, config: StaticConfig) -> None:
        self.config = config
        self.vocabulary: Optional[Vocabulary] = None
        self.model: Optional[WordVectorModel] = None
        self.ids = self.sentence_of = None
        self.tokens = 0

    @property
    def seed(self) -> int:
        return self.config.seed

    @property
    def held_out_fraction(self) -> float:
        return 0.0

    @property
    def encoding_errors(self) -> EncodingErrors:
        return self.config.encoding_errors

    def config_record(self) -> dict:
        return {self.name: {**asdict(self.config), "learning_rate": self.config.lr}}

    def start(self) -> DistributedContext:
        """One process on ``config.device`` (word2vec does not join a torchrun process group)."""
        return DistributedContext(device=resolve_device(self.config.device))

    def encode(self, documents) -> list[list[str]]:
        lowercase = self.config.lowercase
        return [split_words(sentence, lowercase=lowercase) for document in documents for sentence in document]

    def build(self, train, held) -> None:
        config = self.config
        self.vocabulary = Vocabulary.build(train, config.min_count, config.max_vocab)
        self.ids, self.sentence_of = encode_sentences(train, self.vocabulary)
        self.tokens = sum(len(sentence) for sentence in train)
        self.model = WordVectorModel(len(self.vocabulary.words), config.dim)

    def fit(self, run: Run) -> dict:
        config, device = self.config, run.context.device
        self.model.to(device)
        sgd = _SGD(optimizer=torch.optim.SGD(self.model.parameters(), lr=config.lr), device=device,
                   noise=torch.as_tensor(self.vocabulary.counts, dtype=torch.float64).pow(NOISE_POWER).to(device),
                   generator=torch.Generator(device=device).manual_seed(config.seed),
                   rng=np.random.default_rng(config.seed),
                   bar=tqdm(desc=f"pretrain {config.architecture}", unit="batch", disable=not config.show_progress))
        log = RunLog(run.out / "log.jsonl", enabled=run.context.is_main)
        for epoch in range(config.epochs):
            log.write(self._epoch(epoch, sgd))
        sgd.bar.close()
        return {"vocab_size": len(self.vocabulary.words), "dim": config.dim, "text": str(run.out / TEXT_FILE),
                "binary": str(run.out / BINARY_FILE), "tokens": self.tokens}

    def _epoch(self, epoch: int, sgd: _SGD) -> dict:
        """One pass over the epoch's examples; returns its ``log.jsonl`` record."""
        config = self.config
        context, target = self._epoch_examples(sgd.rng)
        if len(target) == 0:
            raise ValueError("the corpus gives no (word, context) pair: every sentence has at most one known word")
        n_batches = -(-len(target) // config.batch_size)
        if epoch == 0:
            sgd.bar.total = n_batches * config.epochs
        loss_sum, started = 0.0, time.perf_counter()
        for number, start in enumerate(range(0, len(target), config.batch_size)):
            # linear decay over the whole run, as in word2vec
            lr = config.lr * max(MIN_LEARNING_RATE_FACTOR, 1.0 - (epoch + number / n_batches) / config.epochs)
            batch = slice(start, start + config.batch_size)
            loss = self._step(context[batch], target[batch], lr, sgd)
            if not math.isfinite(loss):
                self._diverged(epoch, f"batch {number + 1} of {n_batches}", f"the loss is {loss}", lr)
            loss_sum += loss
        broken = nonfinite_parameters(self.model)
        if broken:
            self._diverged(epoch, "its end", f"the vectors hold non-finite numbers ({', '.join(broken)})", lr)
        elapsed = time.perf_counter() - started
        return {"epoch": epoch + 1, "loss": loss_sum / len(target), "lr": lr, "examples": len(target),
                "examples_per_s": len(target) / elapsed if elapsed > 0 else None}

    def _diverged(self, epoch: int, where: str, what: str, lr: float) -> None:
        """Raise :class:`~.training.TrainingDivergedError` (nothing is written: the vectors never are)."""
        config = self.config
        raise TrainingDivergedError(
            f"word2vec training diverged in epoch {epoch + 1} of {config.epochs}, at {where}: {what} (learning "
            f"rate {lr:g}, --lr {config.lr:g}). No vectors were written. Lower --lr (learning_rate), e.g. to "
            f"{config.lr / 10:g}, and run again with --overwrite", step=epoch + 1)

    def _epoch_examples(self, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """``(context (n, k), target (n,))`` of one epoch after subsampling, shuffled."""
        config = self.config
        keep = rng.random(len(self.ids)) < keep_probabilities(self.vocabulary.counts, config.sample)[self.ids]
        ids, sentence_of = self.ids[keep], self.sentence_of[keep]
        reduced = rng.integers(1, config.window + 1, size=len(ids))
        context, target = EXAMPLES[config.architecture](ids, sentence_of, reduced, config.window, self.model.pad)
        order = rng.permutation(len(target))
        return context[order], target[order]

    def _step(self, context: np.ndarray, target: np.ndarray, lr: float, sgd: _SGD) -> float:
        """One SGD update on ``(batch, k)`` contexts and ``(batch,)`` targets; returns the summed loss."""
        for group in sgd.optimizer.param_groups:
            group["lr"] = lr
        batch_context = torch.as_tensor(context, device=sgd.device)
        batch_target = torch.as_tensor(target, device=sgd.device)
        negatives = torch.multinomial(sgd.noise, len(batch_target) * self.config.negative, replacement=True,
                                      generator=sgd.generator).view(len(batch_target), self.config.negative)
        loss = self.model(batch_context, batch_target, negatives)
        sgd.optimizer.zero_grad()
        loss.backward()
        sgd.optimizer.step()
        value = float(loss.detach())
        sgd.bar.update(1)
        sgd.bar.set_postfix(loss=f"{value / len(batch_target):.4f}")
        return value

    def save(self, folder: Path) -> None:
        vectors = self.model.inputs.weight.detach()[: len(self.vocabulary.words)].float().cpu().numpy()
        write_word2vec(folder / TEXT_FILE, self.vocabulary.words, vectors)
        write_word2vec(folder / BINARY_FILE, self.vocabulary.words, vectors, binary=True)


def most_similar(words: list[str], vectors: np.ndarray, query: str, k: int = 5) -> list[tuple[str, float]]:
    """The ``k`` nearest words to ``query`` by cosine similarity (``query`` itself excluded)."""
    index = {w: i for i, w in enumerate(words)}
    if query not in index:
        raise KeyError(f"{query!r} is not in the vocabulary of {len(words)} words")
    normed = vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
    scores = normed @ normed[index[query]]
    scores[index[query]] = -np.inf
    best = np.argsort(-scores)[:k]
    return [(words[i], float(scores[i])) for i in best]


def pretrain_static(
    corpus: Union[str, os.PathLike],
    out: Union[str, os.PathLike],
    config: Optional[StaticConfig] = None,
    *,
    overwrite: bool = False,
) -> dict:
    """Train skip-gram or CBOW vectors on CORPUS and write ``vectors.txt`` and ``vectors.bin`` into OUT.

    Returns
    -------
    dict
        ``vocab_size``, ``dim``, ``text`` and ``binary`` (the two paths), ``tokens``.
    """
    return run_objective(StaticRecipe(config or StaticConfig()), corpus, out, overwrite=overwrite)
