"""The training loop shared by the neural pretraining objectives (MLM+NSP, bidirectional LM).

AdamW with linear warmup and linear decay to zero at ``max_steps``, gradient accumulation, gradient
clipping, bf16/fp16 autocast (fp16 with a gradient scaler), DistributedDataParallel under torchrun,
a tqdm bar with the running loss, ``log.jsonl``, periodic checkpoints, ``resume``, and held-out
evaluation before training and at the end.

An *objective* supplies the data and the loss (see :class:`Objective`); the loop knows nothing of
BERT or LSTMs.

Batching: a *micro-batch* holds ``batch_size`` examples per process; one optimizer step takes
``grad_accumulation`` micro-batches per process, so an update sees
``batch_size * grad_accumulation * world_size`` examples. Every epoch visits the examples in a new
order drawn from ``seed`` and the epoch number; micro-batch ``i`` draws its randomness (masks) from
``seed`` and ``i``, so a resumed run sees the same data as an uninterrupted one.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import time
from abc import ABC, abstractmethod
from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal, Optional, Union

import torch
from tqdm.auto import tqdm

from .._files import atomic_file
from ..devices import PRECISIONS
from .choices import check_choice
from .distributed import DistributedContext, wrap_model
from .seeds import data_order_seed, dropout_seed, mask_seed

#: autocast dtype of the forward pass (fp16 with a gradient scaler); ``devices.PRECISIONS`` maps them
Precision = Literal["fp32", "bf16", "fp16"]

Batch = dict[str, torch.Tensor]
Stats = dict[str, float]

#: files a run writes besides the model; ``overwrite`` removes them so that runs never mix
RUN_FILES = ("log.jsonl", "held_out.json", "checkpoints")
#: written by the command line before the library runs; does not make OUT count as "holding files"
CONFIG_FILE = "pretrain_config.json"


@dataclass
class TrainingOptions:
    """Optimisation and bookkeeping settings of a pretraining run.

    Attributes
    ----------
    max_steps : int
        Optimizer updates.
    batch_size : int
        Examples per micro-batch per process.
    grad_accumulation : int
        Micro-batches per update (per process).
    learning_rate : float
        Peak learning rate (reached at the end of warmup).
    warmup_steps : int, optional
        Linear warmup length; default 10% of ``max_steps``.
    weight_decay : float
        AdamW decoupled weight decay (not applied to biases and norm weights).
    max_grad_norm : float
        Gradient clipping (0 disables).
    precision : {"fp32", "bf16", "fp16"}
        Autocast dtype (fp16 uses a gradient scaler).
    device : str
        ``"auto"``, ``"cpu"``, ``"cuda"``.
    seed : int
        Seeds model initialisation, data order and masks.
    log_every : int
        Steps between ``log.jsonl`` records.
    checkpoint_every : int
        Steps between checkpoints (0: only the final one).
    keep_checkpoints : int
        Most recent checkpoints kept.
    held_out_fraction : float
        Share of documents held out for the held-out loss (0 disables).
    show_progress : bool
        Show the tqdm bar (main process only).
    """

    max_steps: int = 1000
    batch_size: int = 32
    grad_accumulation: int = 1
    learning_rate: float = 5e-4
    warmup_steps: Optional[int] = None
    weight_decay: float = 0.01
    max_grad_norm: float = 1.0
    precision: Precision = "fp32"
    device: str = "auto"
    seed: int = 0
    log_every: int = 10
    checkpoint_every: int = 500
    keep_checkpoints: int = 2
    held_out_fraction: float = 0.05
    show_progress: bool = True

    def __post_init__(self) -> None:
        positive = {"max_steps": self.max_steps, "batch_size": self.batch_size,
                    "grad_accumulation": self.grad_accumulation, "log_every": self.log_every,
                    "keep_checkpoints": self.keep_checkpoints}
        for name, value in positive.items():
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name}={value!r} must be a positive integer")
        check_choice("precision", self.precision, Precision)
        if not self.learning_rate > 0:
            raise ValueError(f"learning_rate={self.learning_rate} must be > 0")
        if self.warmup_steps is not None and not 0 <= self.warmup_steps <= self.max_steps:
            raise ValueError(f"warmup_steps={self.warmup_steps} must be between 0 and max_steps={self.max_steps}")
        if self.checkpoint_every < 0:
            raise ValueError(f"checkpoint_every={self.checkpoint_every} must be >= 0 (0: final checkpoint only)")

    @property
    def warmup(self) -> int:
        return self.warmup_steps if self.warmup_steps is not None else max(1, self.max_steps // 10)


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


# -- output directory ---------------------------------------------------------------------------


def prepare_output_dir(out: Union[str, os.PathLike], *, overwrite: bool = False, resume: bool = False) -> Path:
    """Check OUT and create it.

    OUT may not hold files (other than ``pretrain_config.json``) unless ``overwrite`` (which removes a
    previous run's log and checkpoints) or ``resume`` is given.

    Raises
    ------
    FileExistsError
        If OUT is a file, or holds files and neither ``overwrite`` nor ``resume`` is set.
    """
    path = Path(out)
    if path.exists() and not path.is_dir():
        raise FileExistsError(f"OUT {str(path)!r} is a file; pass a directory to write the model into")
    held = sorted(p.name for p in path.iterdir() if p.name != CONFIG_FILE) if path.is_dir() else []
    if held and not (overwrite or resume):
        shown = ", ".join(held[:5]) + (", ..." if len(held) > 5 else "")
        raise FileExistsError(
            f"OUT {str(path)!r} already holds files ({shown}); pass --overwrite (overwrite=True) to replace "
            "them, --resume to continue from its last checkpoint, or choose another directory"
        )
    if overwrite and not resume:
        for name in RUN_FILES:
            target = path / name
            if target.is_dir():
                shutil.rmtree(target)
            elif target.exists():
                target.unlink()
    path.mkdir(parents=True, exist_ok=True)
    return path


def write_json(path: Union[str, os.PathLike], record, *, default=None) -> None:
    """Write ``record`` as indented JSON, atomically: an interruption leaves the previous ``path``."""
    with atomic_file(path, what="file") as temporary:
        with open(temporary, "w", encoding="utf-8") as handle:
            json.dump(record, handle, indent=2, default=default)
            handle.write("\n")


# -- checkpoints --------------------------------------------------------------------------------


def latest_checkpoint(out: Union[str, os.PathLike]) -> Optional[Path]:
    """The newest ``checkpoints/step-*.pt`` in OUT, or ``None``."""
    found = sorted(Path(out, "checkpoints").glob("step-*.pt"))
    return found[-1] if found else None


def resolve_resume(out: Path, resume: Union[bool, str, os.PathLike, None]) -> Optional[Path]:
    """``True`` -> OUT's latest checkpoint; a path -> that checkpoint file; falsy -> ``None``."""
    if not resume:
        return None
    if resume is True:
        found = latest_checkpoint(out)
        if found is None:
            raise FileNotFoundError(
                f"resume was asked for but {out / 'checkpoints'} holds no step-*.pt checkpoint; "
                "drop --resume to start a new run"
            )
        return found
    path = Path(resume)
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint {str(path)!r} does not exist")
    return path


def save_checkpoint(out: Path, step: int, state: dict, keep: int) -> Path:
    """Write ``checkpoints/step-XXXXXXXX.pt`` atomically and keep only the ``keep`` newest.

    Only checkpoints of earlier steps are pruned; the one just written always stays.
    """
    directory = out / "checkpoints"
    directory.mkdir(parents=True, exist_ok=True)
    target = directory / f"step-{step:08d}.pt"
    with atomic_file(target, what="checkpoint") as temporary:  # hidden name: not matched by step-*.pt
        torch.save(state, temporary)
    earlier = [path for path in sorted(directory.glob("step-*.pt")) if path.name < target.name]
    for old in earlier[: max(0, len(earlier) - (keep - 1))]:
        old.unlink()
    return target


def check_no_newer_checkpoints(out: Path, step: int, resume: Path) -> None:
    """Refuse to resume at ``step`` while OUT holds checkpoints of later steps (of the run being
    abandoned): a later ``--resume`` would pick them up, and pruning would drop the new ones.

    Raises
    ------
    FileExistsError
        Naming the later checkpoints, which contextembed does not delete unasked.
    """
    current = f"step-{step:08d}.pt"
    newer = [path for path in sorted((out / "checkpoints").glob("step-*.pt")) if path.name > current]
    if newer:
        names = ", ".join(path.name for path in newer)
        raise FileExistsError(
            f"resuming from {resume} (step {step}), but {out / 'checkpoints'} also holds later checkpoints "
            f"({names}) of the run being abandoned; move or delete them first, or resume from the latest"
        )


def load_checkpoint(path: Path, fingerprint: dict) -> dict:
    """Read a checkpoint and check that it belongs to this run.

    Raises
    ------
    ValueError
        If the checkpoint cannot be read or its fingerprint differs from ``fingerprint``.
    """
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # noqa: BLE001 - any unreadable file gets the same clear message
        raise ValueError(f"checkpoint {str(path)!r} cannot be read ({error}); it is not a contextembed checkpoint") from None
    if not isinstance(state, dict) or "fingerprint" not in state:
        raise ValueError(f"checkpoint {str(path)!r} is not a contextembed pretraining checkpoint")
    differences = _differences(state["fingerprint"], fingerprint)
    if differences:
        raise ValueError(
            f"checkpoint {str(path)!r} is incompatible with this run: {'; '.join(differences)}. Resume with "
            "the settings it was made with, or start a new run with --overwrite"
        )
    return state


def _differences(saved: dict, current: dict) -> list[str]:
    keys = sorted(set(saved) | set(current))
    return [
        f"{key}: checkpoint has {saved.get(key)!r}, this run has {current.get(key)!r}"
        for key in keys
        if saved.get(key) != current.get(key)
    ]


# -- optimisation -------------------------------------------------------------------------------


def make_optimizer(model: torch.nn.Module, options: TrainingOptions) -> torch.optim.AdamW:
    """AdamW; biases and one-dimensional (norm) weights get no weight decay."""
    decay, no_decay = [], []
    for name, parameter in model.named_parameters():
        if parameter.requires_grad:
            (no_decay if parameter.ndim < 2 or name.endswith("bias") else decay).append(parameter)
    groups = [{"params": decay, "weight_decay": options.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=options.learning_rate, betas=(0.9, 0.999), eps=1e-6)


def linear_schedule(step: int, warmup: int, total: int) -> float:
    """Learning-rate factor: ``step / warmup`` while warming up, then linear decay to 0 at ``total``."""
    if step < warmup:
        return (step + 1) / warmup
    return max(0.0, (total - step) / max(1, total - warmup))


def make_scheduler(optimizer: torch.optim.Optimizer, options: TrainingOptions) -> torch.optim.lr_scheduler.LambdaLR:
    warmup, total = options.warmup, options.max_steps
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: linear_schedule(step, warmup, total))


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


class _Log:
    """Appends JSON records to ``log.jsonl`` (main process only)."""

    def __init__(self, path: Path, enabled: bool) -> None:
        self.path, self.enabled = path, enabled

    def write(self, record: dict) -> None:
        if self.enabled:
            with open(self.path, "a", encoding="utf-8") as handle:
                handle.write(json.dumps(record) + "\n")


def evaluate(model: torch.nn.Module, objective: Objective, batches: list[Batch], context: DistributedContext,
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


@dataclass
class _State:
    step: int = 0
    running_loss: Optional[float] = None


def train(
    model: torch.nn.Module,
    objective: Objective,
    options: TrainingOptions,
    out: Path,
    context: DistributedContext,
    *,
    resume: Optional[Path] = None,
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
        A checkpoint to continue from (its fingerprint must match the objective's).

    Returns
    -------
    dict
        ``steps``, ``held_out_before`` (``None`` when resumed or nothing is held out),
        ``held_out`` (statistics after training) and ``running_loss`` (smoothed training loss).
    """
    model.to(context.device)
    wrapped = wrap_model(model, context)
    dtype = PRECISIONS[options.precision]
    optimizer = make_optimizer(model, options)
    scheduler = make_scheduler(optimizer, options)
    scaler = torch.amp.GradScaler(context.device.type, enabled=dtype == torch.float16)
    state = _State()
    fingerprint = objective.fingerprint()
    if resume is not None:
        state.step = _restore(load_checkpoint(resume, fingerprint), model, optimizer, scheduler, scaler)
        check_no_newer_checkpoints(out, state.step, resume)
    torch.manual_seed(dropout_seed(options.seed, state.step, context.rank))
    log = _Log(out / "log.jsonl", context.is_main)
    held_out = objective.held_out_batches(options.batch_size)
    before = None
    if held_out and state.step == 0:
        before = evaluate(model, objective, held_out, context, dtype)
        log.write({"step": 0, "held_out": before})
    stream = iter_micro_batches(objective, options, context, start=state.step * options.grad_accumulation)
    bar = tqdm(total=options.max_steps, initial=state.step, desc="pretrain", unit="step",
               disable=not (context.is_main and options.show_progress))
    window: Stats = defaultdict(float)
    started = time.perf_counter()
    while state.step < options.max_steps:
        _update(wrapped, objective, stream, optimizer, scheduler, scaler, options, context, dtype, window)
        state.step += 1
        last = window["_last_loss"]
        state.running_loss = last if state.running_loss is None else 0.9 * state.running_loss + 0.1 * last
        bar.update(1)
        bar.set_postfix(loss=f"{state.running_loss:.4f}")
        if state.step % options.log_every == 0 or state.step == options.max_steps:
            elapsed = time.perf_counter() - started
            log.write(_record(state.step, context.all_reduce_sums(dict(window)), scheduler, elapsed))
            window, started = defaultdict(float), time.perf_counter()
        if state.step == options.max_steps or (options.checkpoint_every and state.step % options.checkpoint_every == 0):
            _checkpoint(out, state.step, model, optimizer, scheduler, scaler, fingerprint, options, context)
    bar.close()
    after = evaluate(model, objective, held_out, context, dtype) if held_out else None
    if after is not None:
        log.write({"step": state.step, "held_out": after})
    summary = {"steps": state.step, "held_out_before": before, "held_out": after,
               "running_loss": state.running_loss}
    if context.is_main:
        write_json(out / "held_out.json", summary)
    return summary


def _update(wrapped, objective, stream, optimizer, scheduler, scaler, options, context, dtype, window) -> None:
    """One optimizer step over ``grad_accumulation`` micro-batches; adds statistics to ``window``."""
    wrapped.train()
    accumulation = options.grad_accumulation
    step_loss = 0.0
    for k in range(accumulation):
        batch = _to(next(stream), context.device)
        syncing = k == accumulation - 1 or not context.is_distributed
        with contextlib.nullcontext() if syncing else wrapped.no_sync():
            with _autocast(context.device, dtype):
                loss, stats = objective.loss(wrapped, batch)
            scaler.scale(loss / accumulation).backward()
        value = float(loss.detach())
        step_loss += value / accumulation
        window["loss_sum"] += value
        window["loss_count"] += 1
        for key, value in stats.items():
            window[key] += value
    window["_last_loss"] = step_loss
    if options.max_grad_norm:
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(wrapped.parameters(), options.max_grad_norm)
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad(set_to_none=True)
    scheduler.step()


def _record(step: int, window: Stats, scheduler, elapsed: float) -> dict:
    window = {k: v for k, v in window.items() if not k.startswith("_")}
    record = {"step": step, **summarize(window)}
    tokens = record.get("tokens", 0.0)
    record["lr"] = scheduler.get_last_lr()[0]
    record["tokens_per_s"] = tokens / elapsed if elapsed > 0 else None
    return record


def _checkpoint(out, step, model, optimizer, scheduler, scaler, fingerprint, options, context) -> None:
    if context.is_main:
        state = {
            "step": step,
            "fingerprint": fingerprint,
            "model": model.state_dict(),
            "optimizer": optimizer.state_dict(),
            "scheduler": scheduler.state_dict(),
            "scaler": scaler.state_dict(),
            "options": asdict(options),
        }
        save_checkpoint(out, step, state, options.keep_checkpoints)
    context.barrier()


def _restore(state: dict, model, optimizer, scheduler, scaler) -> int:
    try:
        model.load_state_dict(state["model"])
    except RuntimeError as error:
        raise ValueError(f"the checkpoint's weights do not fit this model: {error}") from None
    optimizer.load_state_dict(state["optimizer"])
    scheduler.load_state_dict(state["scheduler"])
    scaler.load_state_dict(state["scaler"])
    return int(state["step"])
