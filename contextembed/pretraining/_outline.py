"""The one outline every pretraining method follows, and the recipe a method fills it with.

:func:`run_objective` runs a :class:`Recipe` on CORPUS into OUT:

1. check CORPUS and OUT (apart from each other and from ``init``; main process: OUT's content); hash
   the corpus; write ``pretrain_config.json`` when asked;
2. find the checkpoint to resume from (its provenance record must match this run's, see
   :meth:`NeuralRecipe.checkpoint_record`);
3. read the corpus; the recipe sees all of it first (MLM trains its WordPiece vocabulary there);
4. hold out documents; the recipe encodes both parts into its examples (the raw lines are dropped);
5. seed model initialisation; the recipe builds its model and objective;
6. the recipe trains (neural methods: :func:`~.training.train`; word2vec: its own loop);
7. the main process writes the model into OUT as a fresh set, with its provenance record
   (:func:`~.run_files.publish_model`); the recipe's summary is returned.

A resumed run that fails before its first new checkpoint puts the previous ``pretrain_config.json``
back (it describes the checkpoints in OUT). :func:`~.mlm.pretrain_mlm`, :func:`~.bilm.pretrain_bilm`
and :func:`~.static.pretrain_static` each make their recipe and call :func:`run_objective`; so does
``contextembed pretrain``, with ``save_config=True``.
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, ClassVar, Optional, Union

import torch

from .._runtime import provenance
from .._runtime.files import check_apart
from ._corpus import EncodingErrors, corpus_files, corpus_hash, read_corpus, split_held_out
from ._distributed import DistributedContext, setup_distributed, teardown_distributed
from ._run_files import (
    MODEL_ARTIFACT,
    config_kept_on_failure,
    prepare_output_dir,
    publish_model,
    resolve_resume,
    write_config,
)
from ._training import Objective, TrainingOptions, checkpoint_record, train

PathLike = Union[str, os.PathLike]


@dataclass(frozen=True)
class Run:
    """Where one run happens."""

    #: the output directory (checked and created)
    out: Path
    #: this process's rank and device
    context: DistributedContext
    #: the checkpoint to continue from, if any
    checkpoint: Optional[Path] = None
    #: content hash of the corpus files (:func:`~.corpus.corpus_hash`)
    corpus_hash: str = ""


class Recipe(ABC):
    """What one pretraining method adds to the outline of :func:`run_objective`.

    A recipe serves one run: each step keeps what it builds (tokenizer, vocabulary, model,
    objective) for the steps after it. The steps, in the order the outline calls them:
    :meth:`start`, :meth:`prepare`, :meth:`encode` (training part, then held-out part),
    :meth:`build`, :meth:`fit`, :meth:`save` (main process), :meth:`summary`.
    """

    #: the method's name: the sub-command and the ``objective`` of ``pretrain_config.json``
    name: ClassVar[str]

    # -- settings the outline reads

    @property
    @abstractmethod
    def seed(self) -> int:
        """Seeds model initialisation (and the method's other random streams, :mod:`.seeds`)."""

    @property
    @abstractmethod
    def held_out_fraction(self) -> float:
        """Share of documents held out (see :func:`~.corpus.split_held_out`)."""

    @property
    @abstractmethod
    def encoding_errors(self) -> EncodingErrors:
        """What reading the corpus does with lines that are not UTF-8."""

    @abstractmethod
    def config_record(self) -> dict:
        """The resolved settings, as sections of ``pretrain_config.json``."""

    def input_paths(self) -> dict[str, str]:
        """Inputs besides the corpus that OUT must stay apart from, by option (``{"--init": DIR}``)."""
        return {}

    def model_record(self, run: Run) -> dict:
        """The provenance record of the model written into OUT: the corpus's hash and every setting."""
        return provenance.record(MODEL_ARTIFACT, method=self.name, corpus=run.corpus_hash,
                                 **flatten_settings(self.config_record()))

    # -- steps

    @abstractmethod
    def start(self) -> DistributedContext:
        """Join the process group where the method supports torchrun; this process's context."""

    def prepare(self, documents: list[list[str]], run: Run) -> None:
        """Use the whole corpus before the held-out split (default: nothing)."""

    @abstractmethod
    def encode(self, documents: list[list[str]]) -> Any:
        """The method's examples of ``documents`` (ids, words), replacing the raw lines."""

    @abstractmethod
    def build(self, train: Any, held: Any) -> None:
        """Build the model and whatever training needs, after the outline seeded initialisation."""

    @abstractmethod
    def fit(self, run: Run) -> dict:
        """Train; returns the run's summary."""

    @abstractmethod
    def save(self, folder: Path) -> None:
        """Write the trained model's files into ``folder`` (an empty directory; main process only),
        which :func:`~.run_files.publish_model` then moves into OUT as one set."""

    def summary(self, result: dict) -> dict:
        """What the library function returns (default: ``result`` of :meth:`fit`)."""
        return result


class NeuralRecipe(Recipe):
    """A recipe trained by :func:`~.training.train`: AdamW, checkpoints, resume, torchrun.

    :meth:`build` sets :attr:`module` (the module trained and checkpointed) and :attr:`objective`.
    """

    #: training settings a resumed run may change; every other setting must be the checkpoint's
    RESUMABLE: ClassVar[tuple[str, ...]] = ("max_steps", "learning_rate", "log_every", "checkpoint_every",
                                            "keep_checkpoints", "device", "show_progress")
    #: settings that are paths, checked through what they produce (model shape, vocabulary) instead
    path_settings: ClassVar[tuple[str, ...]] = ("init",)

    def __init__(self, config: Any, training: TrainingOptions) -> None:
        self.config, self.training = config, training
        self.module: Optional[torch.nn.Module] = None
        self.objective: Optional[Objective] = None

    @property
    def seed(self) -> int:
        return self.training.seed

    @property
    def held_out_fraction(self) -> float:
        return self.training.held_out_fraction

    @property
    def encoding_errors(self) -> EncodingErrors:
        return self.config.encoding_errors

    def config_record(self) -> dict:
        return {self.name: asdict(self.config), "training": asdict(self.training)}

    def input_paths(self) -> dict[str, str]:
        init = getattr(self.config, "init", None)
        return {} if init is None else {"--init": os.fspath(init)}

    def checkpoint_record(self, run: Run) -> dict:
        """What a checkpoint of this run records and a resumed run must match: the corpus's hash,
        the settings (but :attr:`RESUMABLE` and :attr:`path_settings`), the model's shape and
        vocabulary (:meth:`~.training.Objective.fingerprint`)."""
        skipped = {f"training.{name}" for name in self.RESUMABLE}
        skipped |= {f"{self.name}.{name}" for name in self.path_settings}
        settings = {name: value for name, value in flatten_settings(self.config_record()).items()
                    if name not in skipped}
        return checkpoint_record(self.objective, method=self.name, corpus=run.corpus_hash, **settings)

    def start(self) -> DistributedContext:
        return setup_distributed(self.training.device)

    def fit(self, run: Run) -> dict:
        return train(self.module, self.objective, self.training, out=run.out, context=run.context,
                     resume=run.checkpoint, record=self.checkpoint_record(run))


def flatten_settings(sections: dict, prefix: str = "") -> dict:
    """``{"training": {"seed": 0}}`` -> ``{"training.seed": 0}`` (so that a differing setting is named
    by its own name); paths become strings."""
    flat = {}
    for key, value in sections.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            flat.update(flatten_settings(value, f"{name}."))
        else:
            flat[name] = os.fspath(value) if isinstance(value, os.PathLike) else value
    return flat


def run_objective(
    recipe: Recipe,
    corpus: PathLike,
    out: PathLike,
    *,
    overwrite: bool = False,
    resume: Union[bool, PathLike] = False,
    save_config: bool = False,
) -> dict:
    """Pretrain with ``recipe`` on CORPUS into OUT, following the outline of the module docstring.

    Parameters
    ----------
    recipe : Recipe
        The method, made from its settings (:class:`~.mlm.MLMRecipe`, :class:`~.bilm.BiLMRecipe`,
        :class:`~.static.StaticRecipe`).
    corpus : str or path
        Text file or directory: one sentence per line, a blank line between documents.
    out : str or path
        Output directory; must not hold files (besides ``pretrain_config.json``) unless
        ``overwrite`` or ``resume``.
    overwrite : bool
        Allow an OUT that already holds files (a previous run's log and checkpoints are removed).
    resume : bool or path
        ``True``: continue from OUT's latest checkpoint; a path: from that checkpoint.
    save_config : bool
        Write the resolved configuration to ``OUT/pretrain_config.json`` once OUT is checked.

    Returns
    -------
    dict
        The recipe's summary.

    Raises
    ------
    FileNotFoundError
        If CORPUS does not exist (before OUT is touched), or ``resume`` finds no checkpoint.
    FileExistsError
        If OUT holds files and neither ``overwrite`` nor ``resume`` is given (or, with ``overwrite``,
        files no earlier run wrote, see :func:`~.run_files.prepare_output_dir`).
    ValueError
        If OUT is, lies inside or contains CORPUS or ``init``.
    ProvenanceError
        If the ``resume`` checkpoint was made from another corpus, other settings or another model.
    TrainingDivergedError
        If training diverged (no model is written; earlier checkpoints are kept).
    """
    corpus_files(corpus)
    out = Path(out)
    for option, path in {"CORPUS": os.fspath(corpus), **recipe.input_paths()}.items():
        check_apart(out, path, output_what="OUT", source_what=option)
    context = recipe.start()
    try:
        with config_kept_on_failure(out, enabled=save_config and bool(resume) and context.is_main):
            run = _open(recipe, corpus, out, context, overwrite=overwrite, resume=resume, save_config=save_config)
            _build(recipe, corpus, run)
            result = recipe.fit(run)
            if context.is_main:
                publish_model(run.out, recipe.save, recipe.model_record(run))
            return recipe.summary(result)
    finally:
        teardown_distributed(context)


def _open(recipe: Recipe, corpus: PathLike, out: Path, context: DistributedContext, *, overwrite: bool,
          resume: Union[bool, PathLike], save_config: bool) -> Run:
    """Check and create OUT and write the configuration (main process); find the checkpoint."""
    if context.is_main:
        prepare_output_dir(out, overwrite=overwrite, resume=bool(resume))
        if save_config:
            write_config(out, {"objective": recipe.name, "corpus": str(Path(corpus).resolve()),
                               **recipe.config_record()})
    context.barrier()
    return Run(out, context, resolve_resume(out, resume), corpus_hash(corpus))


def _build(recipe: Recipe, corpus: PathLike, run: Run) -> None:
    """Read the corpus, let the recipe encode it, seed, and let the recipe build its model.

    The raw lines live only in this function: once encoded, training holds the recipe's examples.
    """
    documents = read_corpus(corpus, encoding_errors=recipe.encoding_errors).documents
    recipe.prepare(documents, run)
    train_documents, held_documents = split_held_out(documents, recipe.held_out_fraction)
    train, held = recipe.encode(train_documents), recipe.encode(held_documents)
    del documents, train_documents, held_documents
    torch.manual_seed(recipe.seed)  # model initialisation (see seeds.py)
    recipe.build(train, held)
