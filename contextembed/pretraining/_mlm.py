"""BERT-style pretraining: masked language modelling, optionally with next-sentence prediction.

Examples. The corpus's sentences are split into WordPiece ids and packed, within each document, into
*segments* of consecutive sentences that fit a budget (a sentence longer than the budget is cut
into several segments, so nothing is dropped). Without NSP a segment fills ``max_length - 2``
pieces and an example is ``[CLS] segment [SEP]``. With NSP segments fill ``(max_length - 3) // 2``
pieces and an example is ``[CLS] A [SEP] B [SEP]`` where A is a segment that has a successor in its
document and, with probability 1/2 (drawn anew every epoch), B is that successor (label 0,
"is next") or a random segment of another document (label 1, "random"), as in Devlin et al. (2018).

Masks are drawn anew for every batch (:func:`~contextembed.pretraining._masking.mask_tokens`).
"""

from __future__ import annotations

import hashlib
import inspect
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Union

import numpy as np
import torch
import torch.nn.functional as F

from ._corpus import EncodingErrors, check_encoding_errors
from ._masking import IGNORE_INDEX, MaskingOptions, mask_tokens
from ._outline import NeuralRecipe, Run, run_objective
from ._run_files import TOKENIZER_DIR
from ._seeds import held_out_seed, nsp_pairs_seed
from .._runtime import json_io as _json
from .._inputs.bounds import Bound, check_setting, check_settings
from ._training import Objective, TrainingOptions

#: BERT miniature sizes (Turc et al. 2019) and BERT-base; a config file may override any field
BERT_PRESETS: dict[str, dict] = {
    "tiny": {"num_hidden_layers": 2, "hidden_size": 128, "num_attention_heads": 2, "intermediate_size": 512},
    "mini": {"num_hidden_layers": 4, "hidden_size": 256, "num_attention_heads": 4, "intermediate_size": 1024},
    "small": {"num_hidden_layers": 4, "hidden_size": 512, "num_attention_heads": 8, "intermediate_size": 2048},
    "base": {"num_hidden_layers": 12, "hidden_size": 768, "num_attention_heads": 12, "intermediate_size": 3072},
}

#: peak learning rates that work for each preset (continued pretraining with ``init``: 5e-5)
PRESET_LEARNING_RATES = {"tiny": 1e-3, "mini": 5e-4, "small": 3e-4, "base": 1e-4, "init": 5e-5, "file": 1e-4}

#: the numeric settings of :class:`MLMConfig` (see :mod:`.settings`)
MLM_BOUNDS: dict[str, Bound] = {
    "vocab_size": Bound(int, 100, 10**6, "--vocab-size"),
    "min_frequency": Bound(int, 1, 10**9, "--min-frequency"),
    "max_length": Bound(int, 8, 2**16, "--max-length"),
}
#: the numeric ``BertConfig`` fields a ``--size`` JSON file may set, and their ranges
BERT_FIELD_BOUNDS: dict[str, Bound] = {
    "num_hidden_layers": Bound(int, 1, 256, "--size file"),
    "hidden_size": Bound(int, 1, 2**16, "--size file"),
    "num_attention_heads": Bound(int, 1, 2**10, "--size file"),
    "intermediate_size": Bound(int, 1, 2**18, "--size file"),
    "max_position_embeddings": Bound(int, 8, 2**16, "--size file"),
    "type_vocab_size": Bound(int, 1, 2**10, "--size file"),
    "hidden_dropout_prob": Bound(float, 0, 1, "--size file", high_open=True),
    "attention_probs_dropout_prob": Bound(float, 0, 1, "--size file", high_open=True),
    "initializer_range": Bound(float, 0, 10, "--size file", low_open=True),
    "layer_norm_eps": Bound(float, 0, 1, "--size file", low_open=True),
}


@dataclass
class MLMConfig:
    """What to pretrain.

    Attributes
    ----------
    size : str
        A preset (tiny, mini, small, base) or the path of a JSON file of ``BertConfig`` fields
        (a preset's fields are the defaults; ``{"preset": "mini", ...}`` picks another base).
    init : str, optional
        A local BERT directory to continue pretraining from (domain-adaptive pretraining); its
        tokenizer and architecture are used and ``size``/``vocab_size``/``lowercase`` are ignored.
    vocab_size : int
        WordPiece vocabulary size trained on the corpus.
    lowercase : bool
        Lowercase (and strip accents) before WordPiece.
    min_frequency : int
        Minimum count of a merged piece in vocabulary training.
    max_length : int
        Pieces per example, special tokens included.
    nsp : bool
        Add next-sentence prediction.
    masking : MaskingOptions
        The masking probabilities.
    encoding_errors : {"skip", "fail"}
        Lines that are not UTF-8 (as :func:`contextembed.pretraining.read_corpus` takes them).
    """

    size: str = "tiny"
    init: Optional[str] = None
    vocab_size: int = 8000
    lowercase: bool = False
    min_frequency: int = 2
    max_length: int = 128
    nsp: bool = False
    masking: MaskingOptions = field(default_factory=MaskingOptions)
    encoding_errors: EncodingErrors = "skip"

    def __post_init__(self) -> None:
        if isinstance(self.masking, dict):
            self.masking = MaskingOptions(**self.masking)
        check_settings(self, MLM_BOUNDS)
        check_encoding_errors(self.encoding_errors)
        if self.init is not None:
            check_bert_directory(self.init)
        elif self.size not in BERT_PRESETS and not os.path.isfile(self.size):
            raise ValueError(
                f"size={self.size!r} is neither a preset ({', '.join(BERT_PRESETS)}) nor an existing config file"
            )
        else:
            size_fields(self.size, self.max_length)


def default_learning_rate(config: MLMConfig) -> float:
    """The peak learning rate used when none is given."""
    if config.init is not None:
        return PRESET_LEARNING_RATES["init"]
    return PRESET_LEARNING_RATES.get(config.size, PRESET_LEARNING_RATES["file"])


# -- model and tokenizer ------------------------------------------------------------------------


def check_bert_directory(path: Union[str, os.PathLike]) -> dict:
    """The ``config.json`` of a local BERT directory.

    Raises
    ------
    ValueError
        If ``path`` is not a directory with a ``config.json`` whose ``model_type`` is ``"bert"``.
    """
    config_file = Path(path, "config.json")
    if not config_file.is_file():
        raise ValueError(f"init={os.fspath(path)!r} is not a Hugging Face model directory (no config.json)")
    from ..encoders._hf_files import read_config

    config = read_config(os.fspath(path))
    if config.get("model_type") != "bert":
        raise ValueError(
            f"init={os.fspath(path)!r} holds a {config.get('model_type')!r} model; continued MLM pretraining "
            "needs a BERT model (model_type 'bert') with a WordPiece tokenizer"
        )
    return config


#: the largest ``--size`` file read (a real one is a few hundred bytes)
_MAX_SIZE_FILE_BYTES = 1 << 20


def size_fields(size: str, max_length: int) -> dict:
    """The ``BertConfig`` fields of a preset name or a JSON file of fields, checked (types, ranges,
    heads that divide the width, positions for ``max_length``)."""
    if size in BERT_PRESETS:
        fields = dict(BERT_PRESETS[size])
    else:
        try:
            data = _json.read(size, max_bytes=_MAX_SIZE_FILE_BYTES)
        except _json.JSONError as error:
            raise ValueError(f"config file {size!r}: {error}") from None
        if not isinstance(data, dict):
            raise ValueError(f"config file {size!r} must hold a JSON object of BertConfig fields")
        if data.get("model_type", "bert") != "bert":
            raise ValueError(f"config file {size!r} describes a {data['model_type']!r} model; expected 'bert'")
        preset = data.pop("preset", "tiny")
        if preset not in BERT_PRESETS:
            raise ValueError(f"config file {size!r}: preset={preset!r} is not one of {', '.join(BERT_PRESETS)}")
        fields = {**BERT_PRESETS[preset], **{k: v for k, v in data.items() if k != "model_type"}}
        _check_bert_fields(fields, size)
    fields.setdefault("max_position_embeddings", max_length)
    if fields["max_position_embeddings"] < max_length:
        raise ValueError(
            f"max_length={max_length} exceeds the model's max_position_embeddings={fields['max_position_embeddings']}"
        )
    return fields


def bert_config(size: str, vocab_size: int, max_length: int, pad_token_id: int):
    """A ``BertConfig`` from a preset name or a JSON file of fields (:func:`size_fields`)."""
    from transformers import BertConfig

    return BertConfig(vocab_size=vocab_size, pad_token_id=pad_token_id, **size_fields(size, max_length))


def _check_bert_fields(fields: dict, source: str) -> None:
    """The numeric fields of a ``--size`` file: types and ranges, and heads that divide the width."""
    for name, bound in BERT_FIELD_BOUNDS.items():
        if name in fields:
            try:
                check_setting(name, fields[name], bound)
            except (TypeError, ValueError) as error:
                raise type(error)(f"config file {source}: {error}") from None
    if fields["hidden_size"] % fields["num_attention_heads"]:
        raise ValueError(f"config file {source}: hidden_size={fields['hidden_size']} is not a multiple of "
                         f"num_attention_heads={fields['num_attention_heads']}")


def train_wordpiece(sentences, vocab_size: int, *, lowercase: bool, min_frequency: int, max_length: int,
                    directory: Path):
    """Train a WordPiece vocabulary with ``tokenizers`` and save a BERT tokenizer into ``directory``."""
    from tokenizers import BertWordPieceTokenizer
    from transformers import BertTokenizerFast

    wordpiece = BertWordPieceTokenizer(lowercase=lowercase, strip_accents=lowercase)
    wordpiece.train_from_iterator(sentences, vocab_size=vocab_size, min_frequency=min_frequency,
                                  show_progress=False)
    directory.mkdir(parents=True, exist_ok=True)
    wordpiece.save_model(str(directory))
    # transformers 5 takes the vocabulary as ``vocab`` (``vocab_file`` is silently ignored there)
    name = "vocab" if "vocab" in inspect.signature(BertTokenizerFast.__init__).parameters else "vocab_file"
    tokenizer = BertTokenizerFast(**{name: str(directory / "vocab.txt")}, do_lower_case=lowercase,
                                  strip_accents=lowercase, model_max_length=max_length)
    if len(tokenizer) != wordpiece.get_vocab_size():
        raise RuntimeError(f"the saved tokenizer has {len(tokenizer)} entries, expected {wordpiece.get_vocab_size()}")
    tokenizer.save_pretrained(directory)
    return tokenizer


def load_tokenizer(directory: Union[str, os.PathLike]):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(os.fspath(directory), local_files_only=True)


class BertPretrainingModel(torch.nn.Module):
    """A ``BertForMaskedLM``/``BertForPreTraining`` whose MLM head runs only at the selected pieces.

    ``forward(input_ids, attention_mask, token_type_ids, selected)`` with ``(batch, seq)`` tensors
    returns ``(mlm_logits (n_selected, vocab), nsp_logits (batch, 2) or None)``.
    """

    def __init__(self, model) -> None:
        super().__init__()
        self.model = model
        self.nsp = hasattr(model.cls, "seq_relationship")

    def forward(self, input_ids, attention_mask, token_type_ids, selected):
        output = self.model.bert(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)
        # (n_selected, width)
        picked = output.last_hidden_state[selected]
        if self.nsp:
            return self.model.cls.predictions(picked), self.model.cls.seq_relationship(output.pooler_output)
        return self.model.cls(picked), None


def build_model(config: MLMConfig, tokenizer):
    """A fresh model from the size preset, or the ``init`` BERT with pretraining heads."""
    from transformers import BertForMaskedLM, BertForPreTraining

    model_class = BertForPreTraining if config.nsp else BertForMaskedLM
    if config.init is not None:
        model = model_class.from_pretrained(config.init, local_files_only=True)
        if model.config.max_position_embeddings < config.max_length:
            raise ValueError(
                f"max_length={config.max_length} exceeds the init model's max_position_embeddings="
                f"{model.config.max_position_embeddings}; pass --max-length {model.config.max_position_embeddings}"
            )
        return model
    return model_class(bert_config(config.size, len(tokenizer), config.max_length, tokenizer.pad_token_id))


# -- examples -----------------------------------------------------------------------------------


#: sentences per tokenizer call: bounds the transient ``Encoding`` objects (tokens, offsets, masks)
TOKENIZE_CHUNK = 10_000


def tokenize_documents(tokenizer, documents: list[list[str]]) -> list[list[np.ndarray]]:
    """WordPiece ids of every sentence (no special tokens, int32 arrays), grouped by document.

    Sentences are tokenized in chunks of :data:`TOKENIZE_CHUNK` and kept as compact arrays, so
    memory grows with 4 bytes per piece rather than with the tokenizer's per-sentence objects.
    """
    backend = tokenizer.backend_tokenizer
    sentences = [sentence for document in documents for sentence in document]
    ids: list[np.ndarray] = []
    for start in range(0, len(sentences), TOKENIZE_CHUNK):
        encoded = backend.encode_batch(sentences[start : start + TOKENIZE_CHUNK], add_special_tokens=False)
        ids.extend(np.asarray(encoding.ids, dtype=np.int32) for encoding in encoded)
    arrays = iter(ids)
    return [[next(arrays) for _ in document] for document in documents]


def pack_segments(sentences, budget: int) -> list[np.ndarray]:
    """Pack one document's sentences (sequences of ids) into int32 segments of at most ``budget`` ids.

    Consecutive sentences share a segment while they fit; a sentence longer than ``budget`` is cut
    into consecutive pieces. Every id appears exactly once, in order.
    """
    segments: list[np.ndarray] = []
    current: list[np.ndarray] = []
    size = 0
    for sentence in sentences:
        sentence = np.asarray(sentence, dtype=np.int32)
        for start in range(0, len(sentence), budget):
            part = sentence[start : start + budget]
            if current and size + len(part) > budget:
                segments.append(np.concatenate(current))
                current, size = [], 0
            current.append(part)
            size += len(part)
    if current:
        segments.append(np.concatenate(current))
    return segments


@dataclass
class SpecialIds:
    cls: int
    sep: int
    pad: int
    mask: int
    random: torch.Tensor

    @classmethod
    def from_tokenizer(cls, tokenizer) -> "SpecialIds":
        special = set(tokenizer.all_special_ids)
        vocab = tokenizer.get_vocab()
        ordinary = sorted(i for token, i in vocab.items() if i not in special and not _is_unused(token))
        return cls(tokenizer.cls_token_id, tokenizer.sep_token_id, tokenizer.pad_token_id,
                   tokenizer.mask_token_id, torch.tensor(ordinary, dtype=torch.long))


def _is_unused(token: str) -> bool:
    return token.startswith("[unused") and token.endswith("]")


class BertObjective(Objective):
    """MLM (+ NSP) examples and loss over packed segments (see the module docstring)."""

    def __init__(self, train_ids, held_ids, ids: SpecialIds, config: MLMConfig, seed: int, fingerprint: dict):
        self.ids, self.config, self.seed, self._fingerprint = ids, config, seed, fingerprint
        budget = (config.max_length - 3) // 2 if config.nsp else config.max_length - 2
        self.train = [pack_segments(document, budget) for document in train_ids]
        self.held = [pack_segments(document, budget) for document in held_ids]
        self.train = [d for d in self.train if d]
        self.held = [d for d in self.held if d]
        if not self.train:
            raise ValueError("the corpus gives no training text after tokenization (every line tokenized to nothing)")
        self._pairs_epoch, self._pairs = None, None
        if config.nsp:
            self._anchors = [(d, k) for d, segments in enumerate(self.train) for k in range(len(segments) - 1)]
            if len(self.train) < 2 or not self._anchors:
                raise ValueError(
                    f"--nsp needs at least two documents (blank line between documents) and a document of two "
                    f"or more segments; the training corpus has {len(self.train)} document(s) and "
                    f"{len(self._anchors)} segment(s) with a successor"
                )
        else:
            self._flat = [segment for segments in self.train for segment in segments]

    # -- examples

    def n_examples(self) -> int:
        return len(self._anchors) if self.config.nsp else len(self._flat)

    def epoch_pairs(self, epoch: int) -> list[tuple[list[int], list[int], int]]:
        """NSP examples ``(A, B, label)`` of ``epoch`` (label 0: B follows A, 1: B is random)."""
        if self._pairs_epoch != epoch:
            generator = torch.Generator().manual_seed(nsp_pairs_seed(self.seed, epoch))
            self._pairs = nsp_pairs(self.train, self._anchors, generator)
            self._pairs_epoch = epoch
        return self._pairs

    def make_batch(self, epoch, indexes, generator):
        if self.config.nsp:
            pairs = self.epoch_pairs(epoch)
            return self._collate([pairs[i] for i in indexes], generator)
        return self._collate([(self._flat[i], None, -1) for i in indexes], generator)

    def held_out_batches(self, batch_size: int):
        if not self.held:
            return []
        generator = torch.Generator().manual_seed(held_out_seed(self.seed))
        if self.config.nsp:
            pool = self.held if len(self.held) > 1 else self.held + self.train
            anchors = [(d, k) for d, segments in enumerate(pool[: len(self.held)]) for k in range(len(segments) - 1)]
            examples = nsp_pairs(pool, anchors, generator) if anchors else []
        else:
            examples = [(segment, None, -1) for segments in self.held for segment in segments]
        return [self._collate(examples[i : i + batch_size], generator) for i in range(0, len(examples), batch_size)]

    def _collate(self, examples, generator):
        ids = self.ids
        rows, first_lengths = [], []
        for first, second, _ in examples:
            parts = [[ids.cls], first, [ids.sep]] + ([] if second is None else [second, [ids.sep]])
            rows.append(np.concatenate(parts).astype(np.int64))
            first_lengths.append(len(first) + 2)  # segment A with [CLS] and [SEP]; segment B (type 1) follows
        width = max(len(row) for row in rows)
        input_ids = torch.full((len(rows), width), ids.pad, dtype=torch.long)
        token_types = torch.zeros((len(rows), width), dtype=torch.long)
        for i, (row, first_length) in enumerate(zip(rows, first_lengths)):
            input_ids[i, : len(row)] = torch.from_numpy(row)
            token_types[i, first_length : len(row)] = 1
        attention = input_ids != ids.pad
        attention[:, 0] = True
        maskable = attention & (input_ids != ids.cls) & (input_ids != ids.sep)
        inputs, labels = mask_tokens(input_ids, maskable, mask_id=ids.mask, random_ids=ids.random,
                                     generator=generator, options=self.config.masking)
        return {"input_ids": inputs, "attention_mask": attention.long(), "token_type_ids": token_types,
                "labels": labels, "nsp_labels": torch.tensor([label for _, _, label in examples])}

    # -- loss

    def loss(self, model, batch):
        labels = batch["labels"]
        selected = labels != IGNORE_INDEX
        mlm_logits, nsp_logits = model(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"], selected)
        targets = labels[selected]
        mlm_sum = F.cross_entropy(mlm_logits.float(), targets, reduction="sum")
        count = int(targets.numel())
        loss = mlm_sum / max(1, count)
        stats = {"mlm_loss_sum": float(mlm_sum.detach()), "mlm_loss_count": count,
                 "mlm_acc_sum": float((mlm_logits.argmax(-1) == targets).sum()), "mlm_acc_count": count,
                 "tokens": float(batch["attention_mask"].sum())}
        if nsp_logits is not None:
            nsp_labels = batch["nsp_labels"]
            nsp_loss = F.cross_entropy(nsp_logits.float(), nsp_labels)
            loss = loss + nsp_loss
            n = int(nsp_labels.numel())
            stats.update({"nsp_loss_sum": float(nsp_loss.detach()) * n, "nsp_loss_count": n,
                          "nsp_acc_sum": float((nsp_logits.argmax(-1) == nsp_labels).sum()), "nsp_acc_count": n})
        return loss, stats

    def fingerprint(self) -> dict:
        return self._fingerprint


def nsp_pairs(documents: list[list[list[int]]], anchors: list[tuple[int, int]], generator: torch.Generator):
    """For every anchor segment ``(document, k)``: its successor (label 0) or, with probability 1/2, a
    uniformly drawn segment of another document (label 1)."""
    coins = torch.rand(len(anchors), generator=generator).tolist()
    others = torch.randint(max(1, len(documents) - 1), (len(anchors),), generator=generator).tolist()
    picks = torch.rand(len(anchors), generator=generator).tolist()
    pairs = []
    for (d, k), coin, other, pick in zip(anchors, coins, others, picks):
        if coin < 0.5 or len(documents) < 2:
            pairs.append((documents[d][k], documents[d][k + 1], 0))
            continue
        other = other + (other >= d)  # uniform over the documents other than d
        segments = documents[other]
        pairs.append((documents[d][k], segments[min(int(pick * len(segments)), len(segments) - 1)], 1))
    return pairs


def _fingerprint(model, tokenizer, config: MLMConfig) -> dict:
    vocab = sorted(tokenizer.get_vocab().items())
    digest = hashlib.sha1(json.dumps(vocab).encode("utf-8")).hexdigest()
    keys = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
            "max_position_embeddings")
    return {"objective": "mlm+nsp" if config.nsp else "mlm", "vocabulary_sha1": digest,
            "max_length": config.max_length, **{key: getattr(model.config, key) for key in keys}}


# -- entry point --------------------------------------------------------------------------------


class MLMRecipe(NeuralRecipe):
    """BERT with MLM (+NSP) in the outline of :func:`~.outline.run_objective`."""

    name = "mlm"
    #: a ``--size`` file and an ``--init`` directory are checked through the model's shape and vocabulary
    path_settings = ("size", "init")

    def __init__(self, config: MLMConfig, training: Optional[TrainingOptions] = None) -> None:
        super().__init__(config, training or TrainingOptions(learning_rate=default_learning_rate(config)))
        self.tokenizer = None
        self.model = None

    def prepare(self, documents, run: Run) -> None:
        """The ``init`` model's tokenizer, the one the checkpoints were trained with (resume), or a new
        WordPiece vocabulary trained on the whole corpus by the main process (kept beside the
        checkpoints, ``OUT/checkpoints/tokenizer``, until the model is written)."""
        config, directory, context = self.config, run.out / TOKENIZER_DIR, run.context
        if config.init is not None:
            self.tokenizer = load_tokenizer(config.init)
            return
        if run.checkpoint is not None and (directory / "tokenizer_config.json").is_file():
            self.tokenizer = load_tokenizer(directory)
            return
        if context.is_main:
            sentences = (sentence for document in documents for sentence in document)
            train_wordpiece(sentences, config.vocab_size, lowercase=config.lowercase,
                            min_frequency=config.min_frequency, max_length=config.max_length,
                            directory=directory)
        context.barrier()
        self.tokenizer = load_tokenizer(directory)

    def encode(self, documents) -> list[list[np.ndarray]]:
        return tokenize_documents(self.tokenizer, documents)

    def build(self, train, held) -> None:
        self.model = build_model(self.config, self.tokenizer)
        self.module = BertPretrainingModel(self.model)
        self.objective = BertObjective(train, held, SpecialIds.from_tokenizer(self.tokenizer), self.config,
                                       self.training.seed, _fingerprint(self.model, self.tokenizer, self.config))

    def save(self, folder: Path) -> None:
        self.model.save_pretrained(folder)
        self.tokenizer.save_pretrained(folder)


def pretrain_mlm(
    corpus: Union[str, os.PathLike],
    out: Union[str, os.PathLike],
    config: Optional[MLMConfig] = None,
    training: Optional[TrainingOptions] = None,
    *,
    overwrite: bool = False,
    resume: Union[bool, str, os.PathLike] = False,
) -> dict:
    """Pretrain (or continue pretraining) a BERT with MLM (+NSP) and save it as a Hugging Face model.

    Parameters
    ----------
    corpus : str or path
        Text file or directory: one sentence per line, a blank line between documents.
    out : str or path
        Output directory; afterwards it holds ``config.json``, ``model.safetensors``, the tokenizer
        files, ``log.jsonl``, ``held_out.json`` and ``checkpoints/``; ``transformers.AutoModel`` and
        :func:`contextembed.load_encoder` load it.
    config : MLMConfig
        Model, vocabulary and objective.
    training : TrainingOptions
        Optimisation settings (default: the learning rate of :func:`default_learning_rate`).
    overwrite : bool
        Allow an OUT that already holds files.
    resume : bool or path
        ``True``: continue from OUT's latest checkpoint; a path: from that checkpoint.

    Returns
    -------
    dict
        ``steps``, ``held_out_before`` and ``held_out`` (``mlm_loss``, ``mlm_acc``, ``nsp_acc``...).
    """
    recipe = MLMRecipe(config or MLMConfig(), training)
    return run_objective(recipe, corpus, out, overwrite=overwrite, resume=resume)
