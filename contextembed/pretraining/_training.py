"""The training loop shared by the neural pretraining objectives (MLM+NSP, bidirectional LM).

AdamW with linear warmup and linear decay to zero at ``max_steps``, gradient accumulation, gradient
clipping, bf16/fp16 autocast (fp16 with a gradient scaler), DistributedDataParallel under torchrun,
a tqdm bar with the running loss, ``log.jsonl``, periodic checkpoints, ``resume``, and held-out
evaluation before training and at the end.

Training stops on divergence: a loss that is not finite (on any process) stops the run before the
update, weights that are not finite after it stop it too (:class:`TrainingDivergedError`); the
diverged state is never checkpointed, so the last checkpoint in OUT is the last good one. Every
checkpoint carries the run's provenance record (:func:`checkpoint_record`), which a resumed run must
match.

An *objective* supplies the data and the loss (see :class:`Objective`); the loop knows nothing of
BERT or LSTMs. :func:`train` keeps what stays fixed in a :class:`Loop` and what changes (step,
running loss, optimizer, scheduler and scaler, the log) in a :class:`RunState`.

Batching: a *micro-batch* holds ``batch_size`` examples per process; one optimizer step takes
``grad_accumulation`` micro-batches per process, so an update sees
``batch_size * grad_accumulation * world_size`` examples. Every epoch visits the examples in a new
order drawn from ``seed`` and the epoch number; micro-batch ``i`` draws its randomness (masks) from
``seed`` and ``i``, so a resumed run sees the same data as an uninterrupted one
(:mod:`~contextembed.pretraining._seeds` lists every stream).

The settings are :class:`TrainingOptions` (:mod:`contextembed.pretraining._training_options`), the
optimiser, its schedule and scaler :class:`Optimisation`
(:mod:`contextembed.pretraining._optimisation`); both are imported here.
"""

from __future__ import annotations

import contextlib
import math
import time
from abc import ABC, abstractmethod
from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Optional

import torch
from tqdm.auto import tqdm

from .._runtime import provenance
from .._runtime.devices import PRECISIONS
from ._distributed import DistributedContext, wrap_model
from ._optimisation import Optimisation, linear_schedule  # noqa: F401  (linear_schedule re-exported)
from ._run_files import (
    RunLog,
    check_no_newer_checkpoints,
    latest_checkpoint,
    load_checkpoint,
    save_checkpoint,
    write_json,
)
from ._seeds import data_order_seed, dropout_seed, mask_seed
from ._training_options import (  # noqa: F401  (re-exported)
    TRAINING_BOUNDS,
    TrainingOptions,
    TrainingPrecision,
)

Batch = dict[str, torch.Tensor]
Stats = dict[str, float]
#: weight of the newest step's loss in the running (exponentially smoothed) training loss
RUNNING_LOSS_WEIGHT = 0.1


class Objective(ABC):
    """Data and loss of one pretraining task, as the loop sees them."""

    @abstractmethod
    def n_examples(self) -> int:
        """Training examples per epoch (the same every epoch)."""

    @abstractmethod
    def make_batch(self, epoch: int, indexes: Sequence[int], generator: torch.Generator) -> Batch:
        """CPU tensors of the training examples ``indexes`` of ``epoch``; masks drawn from ``generator``."""

    @abstractmethod
    def held_out_batches(self, batch_size: int) -> list[Batch]:
        """Fixed held-out batches (the same at every evaluation)."""

    @abstractmethod
    def loss(self, model: torch.nn.Module, batch: Batch) -> tuple[torch.Tensor, Stats]:
        """Scalar loss to minimise and summed statistics.

        Statistics come as pairs ``"<name>_sum"`` / ``"<name>_count"`` (reported as their ratio
        ``<name>``) and plain counts such as ``"tokens"``.
        """

    @abstractmethod
    def fingerprint(self) -> dict:
        """What a checkpoint must match to be resumed (architecture, vocabulary, objective)."""


# -- data stream --------------------------------------------------------------------------------


def iter_micro_batches(
    objective: Objective, options: TrainingOptions, context: DistributedContext, start: int = 0
) -> Iterator[Batch]:
    """This process's micro-batches from global micro-batch number ``start`` on (endless)."""
    n = objective.n_examples()
    if n < context.world_size:
        raise ValueError(f"the corpus gives {n} training example(s), fewer than the {context.world_size} processes")
    global_size = options.batch_size * context.world_size
    per_epoch = max(1, n // global_size)
    index, order_epoch, order = start, None, None
    while True:
        epoch, position = divmod(index, per_epoch)
        if epoch != order_epoch:
            order = torch.randperm(n, generator=torch.Generator().manual_seed(data_order_seed(options.seed, epoch)))
            order_epoch = epoch
        chunk = order[position * global_size : (position + 1) * global_size]
        mine = chunk[context.rank :: context.world_size].tolist()
        generator = torch.Generator().manual_seed(mask_seed(options.seed, index, context.rank))
        yield objective.make_batch(epoch, mine, generator)
        index += 1


def _to(batch: Batch, device: torch.device) -> Batch:
    return {key: value.to(device) for key, value in batch.items()}


def summarize(stats: Stats) -> dict[str, float]:
    """Turn ``x_sum``/``x_count`` pairs into ratios ``x``; other keys pass through."""
    summary = {}
    for key, value in stats.items():
        if key.endswith("_sum"):
            name = key[: -len("_sum")]
            count = stats.get(f"{name}_count", 0)
            if count:
                summary[name] = value / count
        elif not key.endswith("_count"):
            summary[key] = value
    return summary


# -- the loop -----------------------------------------------------------------------------------


class TrainingDivergedError(ValueError):
    """The loss, or the weights after an update, stopped being finite numbers: training diverged.

    Nothing of the diverged state is written (no checkpoint, no model); the checkpoints already in OUT
    are kept.

    Attributes
    ----------
    step : int
        The update at which it was seen (1-based, as in ``log.jsonl``); word2vec: the epoch.
    """

    def __init__(self, message: str, *, step: int) -> None:
        self.step = step
        super().__init__(message)

    def __reduce__(self):
        return (_rebuild_diverged, (str(self), self.step))


def _rebuild_diverged(message: str, step: int) -> "TrainingDivergedError":
    return TrainingDivergedError(message, step=step)


#: the kind of artifact a checkpoint's provenance record names
CHECKPOINT_ARTIFACT = "pretraining checkpoint"


def checkpoint_record(objective: Objective, **fields) -> dict:
    """The provenance record a checkpoint of this run carries and a resumed run must match:
    ``fields`` (corpus hash, settings) and the objective's model fingerprint, as ``model.<key>``."""
    model = {f"model.{key}": value for key, value in objective.fingerprint().items()}
    return provenance.record(CHECKPOINT_ARTIFACT, **fields, **model)


@dataclass(frozen=True)
class Loop:
    """What stays fixed while a run trains."""

    #: the module checkpointed (its ``state_dict``)
    model: torch.nn.Module
    #: what ``objective.loss`` receives: ``model`` in DistributedDataParallel under torchrun
    wrapped: torch.nn.Module
    objective: Objective
    options: TrainingOptions
    context: DistributedContext
    #: receives ``checkpoints/`` and ``held_out.json`` (main process only)
    out: Path
    #: autocast dtype (``options.precision``)
    dtype: torch.dtype
    #: the provenance record every checkpoint carries (:func:`checkpoint_record`)
    record: dict


@dataclass
class Window:
    """Training statistics summed since the last ``log.jsonl`` record, and when that was."""

    stats: Stats = field(default_factory=lambda: defaultdict(float))
    started: float = field(default_factory=time.perf_counter)


@dataclass
class RunState:
    """What changes while a run trains."""

    optimisation: Optimisation
    log: RunLog
    #: optimizer updates done
    step: int = 0
    #: exponentially smoothed training loss (``None`` before the first update)
    running_loss: Optional[float] = None
    window: Window = field(default_factory=Window)

    def add_loss(self, loss: float) -> None:
        """Fold the loss of the update just made into :attr:`running_loss`."""
        if self.running_loss is None:
            self.running_loss = loss
        else:
            self.running_loss = (1 - RUNNING_LOSS_WEIGHT) * self.running_loss + RUNNING_LOSS_WEIGHT * loss


def train(
    model: torch.nn.Module,
    objective: Objective,
    options: TrainingOptions,
    *,
    out: Path,
    context: DistributedContext,
    resume: Optional[Path] = None,
    record: Optional[dict] = None,
) -> dict:
    """Run the optimisation from step 0 (or the ``resume`` checkpoint's step) to ``options.max_steps``.

    Parameters
    ----------
    model : torch.nn.Module
        The module whose ``state_dict`` is checkpointed; ``objective.loss`` receives it (wrapped in
        DistributedDataParallel under torchrun).
    objective : Objective
        Data and loss.
    options : TrainingOptions
        Optimisation settings.
    out : Path
        Receives ``log.jsonl``, ``held_out.json`` and ``checkpoints/`` (main process only).
    context : DistributedContext
        This process's rank and device (:func:`~.distributed.setup_distributed`).
    resume : Path, optional
        A checkpoint to continue from (its provenance record must equal ``record``).
    record : dict, optional
        The provenance record of this run's checkpoints (default: the objective's fingerprint alone,
        :func:`checkpoint_record`).

    Returns
    -------
    dict
        ``steps``, ``held_out_before`` (``None`` when resumed or nothing is held out),
        ``held_out`` (statistics after training) and ``running_loss`` (smoothed training loss).

    Raises
    ------
    TrainingDivergedError
        When the loss or the weights stop being finite (nothing of that state is saved).
    ProvenanceError
        When the ``resume`` checkpoint was made from another corpus, settings or model.
    """
    model.to(context.device)
    loop = Loop(model=model, wrapped=wrap_model(model, context), objective=objective, options=options,
                context=context, out=out, dtype=PRECISIONS[options.precision],
                record=record if record is not None else checkpoint_record(objective))
    run = RunState(Optimisation.create(model, options, context.device),
                   RunLog(out / "log.jsonl", enabled=context.is_main))
    if resume is not None:
        _restore(loop, run, resume)
    torch.manual_seed(dropout_seed(options.seed, run.step, context.rank))
    held_out = objective.held_out_batches(options.batch_size)
    before = _held_out(loop, run, held_out) if run.step == 0 else None
    _optimise(loop, run)
    after = _held_out(loop, run, held_out)
    summary = {"steps": run.step, "held_out_before": before, "held_out": after, "running_loss": run.running_loss}
    if context.is_main:
        write_json(out / "held_out.json", summary)
    return summary


def _optimise(loop: Loop, run: RunState) -> None:
    """Optimizer updates from ``run.step`` to ``max_steps``, with the progress bar, log records and
    checkpoints."""
    options, context = loop.options, loop.context
    micro_batches = iter_micro_batches(loop.objective, options, context, start=run.step * options.grad_accumulation)
    bar = tqdm(total=options.max_steps, initial=run.step, desc="pretrain", unit="step",
               disable=not (context.is_main and options.show_progress))
    run.window = Window()
    try:
        while run.step < options.max_steps:
            loss = _update(loop, run, micro_batches)
            run.step += 1
            run.add_loss(loss)
            bar.update(1)
            bar.set_postfix(loss=f"{run.running_loss:.4f}")
            if run.step % options.log_every == 0 or run.step == options.max_steps:
                _log_window(loop, run)
            if run.step == options.max_steps or (options.checkpoint_every and run.step % options.checkpoint_every == 0):
                _checkpoint(loop, run)
    finally:
        bar.close()


def _update(loop: Loop, run: RunState, micro_batches: Iterator[Batch]) -> float:
    """One optimizer update over ``grad_accumulation`` micro-batches.

    Adds their statistics to ``run.window`` and returns the update's loss (the mean over its
    micro-batches). A loss that is not finite stops the run before the update, weights that are not
    finite after it stop it too (:class:`TrainingDivergedError`).
    """
    loop.wrapped.train()
    accumulation, context = loop.options.grad_accumulation, loop.context
    scaler, window = run.optimisation.scaler, run.window.stats
    step_loss = 0.0
    for k in range(accumulation):
        batch = _to(next(micro_batches), context.device)
        syncing = k == accumulation - 1 or not context.is_distributed
        with contextlib.nullcontext() if syncing else loop.wrapped.no_sync():
            with _autocast(context.device, loop.dtype):
                loss, stats = loop.objective.loss(loop.wrapped, batch)
            scaler.scale(loss / accumulation).backward()
        value = float(loss.detach())
        step_loss += value / accumulation
        window["loss_sum"] += value
        window["loss_count"] += 1
        for key, value in stats.items():
            window[key] += value
    if not _finite_everywhere(context, step_loss):
        where = "" if math.isfinite(step_loss) else f" ({step_loss} here)"
        _diverged(loop, run, f"the training loss is not a finite number{where}")
    run.optimisation.step(loop.wrapped.parameters(), loop.options.max_grad_norm)
    broken = nonfinite_parameters(loop.model)
    if broken:
        shown = ", ".join(broken[:3]) + (f" and {len(broken) - 3} more" if len(broken) > 3 else "")
        _diverged(loop, run, f"the update made weights that are not finite numbers ({shown})")
    return step_loss


def _finite_everywhere(context: DistributedContext, loss: float) -> bool:
    """Whether ``loss`` is finite on every process (one small all-reduce under torchrun, so that all
    processes stop together)."""
    bad = 0.0 if math.isfinite(loss) else 1.0
    if context.is_distributed:
        bad = context.all_reduce_sums({"nonfinite": bad})["nonfinite"]
    return bad == 0.0


def nonfinite_parameters(module: torch.nn.Module) -> list[str]:
    """Names of ``module``'s parameters holding NaN or infinity (one device sync for all of them)."""
    named = list(module.named_parameters())
    if not named:
        return []
    finite = torch.stack([torch.isfinite(parameter.detach()).all() for _, parameter in named])
    if bool(finite.all()):
        return []
    return [name for (name, _), ok in zip(named, finite.tolist()) if not ok]


def _diverged(loop: Loop, run: RunState, what: str) -> None:
    """Log and raise :class:`TrainingDivergedError` for the update after ``run.step``."""
    step, options = run.step + 1, loop.options
    run.log.write({"step": step, "diverged": what})
    kept = latest_checkpoint(loop.out) if loop.context.is_main else None
    lower = f"{options.learning_rate / 10:g}"
    if kept is not None:
        then = (f"the last good checkpoint, {kept}, is kept. Lower the learning rate (--lr, e.g. {lower}) and "
                "continue from it with --resume, or start again with --overwrite")
    else:
        then = f"no checkpoint had been written yet. Lower the learning rate (--lr, e.g. {lower}) and run again"
    raise TrainingDivergedError(
        f"training diverged at step {step} of {options.max_steps}: {what}; the learning rate was "
        f"{run.optimisation.learning_rate:g} (peak --lr {options.learning_rate:g}). Nothing of this step was "
        f"saved and no model was written; {then}", step=step)


def _log_window(loop: Loop, run: RunState) -> None:
    """Write the statistics since the last record (summed over processes) and start a new window."""
    elapsed = time.perf_counter() - run.window.started
    stats = loop.context.all_reduce_sums(dict(run.window.stats))
    record = {"step": run.step, **summarize(stats)}
    record["lr"] = run.optimisation.learning_rate
    record["tokens_per_s"] = record.get("tokens", 0.0) / elapsed if elapsed > 0 else None
    run.log.write(record)
    run.window = Window()


def _held_out(loop: Loop, run: RunState, batches: list[Batch]) -> Optional[dict[str, float]]:
    """Held-out statistics (logged), or ``None`` when nothing is held out."""
    if not batches:
        return None
    stats = evaluate(loop.model, loop.objective, batches, context=loop.context, dtype=loop.dtype)
    run.log.write({"step": run.step, "held_out": stats})
    return stats


def evaluate(model: torch.nn.Module, objective: Objective, batches: list[Batch], *, context: DistributedContext,
             dtype: torch.dtype) -> dict[str, float]:
    """Held-out statistics, each process taking every ``world_size``-th batch, summed over processes."""
    totals: Stats = defaultdict(float)
    was_training = model.training
    model.eval()
    with torch.no_grad():
        for batch in batches[context.rank :: context.world_size]:
            with _autocast(context.device, dtype):
                loss, stats = objective.loss(model, _to(batch, context.device))
            totals["loss_sum"] += float(loss.detach())
            totals["loss_count"] += 1
            for key, value in stats.items():
                totals[key] += value
    model.train(was_training)
    return summarize(context.all_reduce_sums(dict(totals)))


def _autocast(device: torch.device, dtype: torch.dtype):
    if dtype == torch.float32:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=dtype)


def _checkpoint(loop: Loop, run: RunState) -> None:
    """Save model, optimisation state, step and provenance (main process), then wait for every process.

    Only weights checked finite by :func:`_update` get here."""
    if loop.context.is_main:
        state = {"step": run.step, "provenance": loop.record, "model": loop.model.state_dict(),
                 **run.optimisation.state_dict(), "options": asdict(loop.options)}
        save_checkpoint(loop.out, run.step, state, loop.options.keep_checkpoints)
    loop.context.barrier()


def _restore(loop: Loop, run: RunState, checkpoint: Path) -> None:
    """Continue from ``checkpoint``: its weights, optimizer state and step.

    Raises
    ------
    ProvenanceError
        If the checkpoint was made from another corpus, settings or model (its provenance record
        differs from ``loop.record``).
    ValueError
        If the checkpoint cannot be read or its weights do not fit the model.
    FileExistsError
        If OUT holds checkpoints of later steps (:func:`~.run_files.check_no_newer_checkpoints`).
    """
    state = load_checkpoint(checkpoint, loop.record)
    try:
        loop.model.load_state_dict(state["model"])
    except RuntimeError as error:
        raise ValueError(f"the checkpoint's weights do not fit this model: {error}") from None
    run.step = int(state["step"])
    run.optimisation.load_state_dict(state, loop.options, run.step)
    check_no_newer_checkpoints(loop.out, run.step, checkpoint)
