"""The settings of a pretraining run's optimisation and bookkeeping, as the training loop takes them.

:class:`TrainingOptions` holds them (steps, batch sizes, learning rate and its warmup, weight decay,
clipping, precision, seed, logging, checkpoints, the held-out share), checked once when built:
every number against its bound in :data:`TRAINING_BOUNDS` (the command line's ``--max-steps`` and
the others name the same bounds), the precision against :data:`TrainingPrecision`. The loop
(:mod:`contextembed.pretraining._training`) and the optimiser
(:mod:`contextembed.pretraining._optimisation`) read them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Optional

from .._inputs.options import check_choice
from .._inputs.bounds import LEARNING_RATE, SEED, Bound, check_settings

#: autocast dtype of the forward pass (fp16 with a gradient scaler); ``devices.PRECISIONS`` maps them
#: autocast dtype of pretraining (inference precisions are contextembed._runtime.devices.Precision)
TrainingPrecision = Literal["fp32", "bf16", "fp16"]


#: the numeric settings of :class:`TrainingOptions` (see :mod:`.settings`)
TRAINING_BOUNDS: dict[str, Bound] = {
    "max_steps": Bound(int, 1, 10**9, "--max-steps"),
    "batch_size": Bound(int, 1, 2**16, "--batch-size"),
    "grad_accumulation": Bound(int, 1, 2**16, "--grad-accumulation"),
    "learning_rate": LEARNING_RATE,
    "warmup_steps": Bound(int, 0, 10**9, "--warmup-steps", optional=True),
    "weight_decay": Bound(float, 0, 1, "--weight-decay"),
    "max_grad_norm": Bound(float, 0, 1e6, "--max-grad-norm", note="0: no clipping"),
    "seed": SEED,
    "log_every": Bound(int, 1, 10**9, "--log-every"),
    "checkpoint_every": Bound(int, 0, 10**9, "--checkpoint-every", note="0: the final checkpoint only"),
    "keep_checkpoints": Bound(int, 1, 10**4, "--keep-checkpoints"),
    "held_out_fraction": Bound(float, 0, 0.5, "--held-out-fraction", note="0: nothing held out"),
}


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
    precision: TrainingPrecision = "fp32"
    device: str = "auto"
    seed: int = 0
    log_every: int = 10
    checkpoint_every: int = 500
    keep_checkpoints: int = 2
    held_out_fraction: float = 0.05
    show_progress: bool = True

    def __post_init__(self) -> None:
        check_settings(self, TRAINING_BOUNDS)
        check_choice("precision", self.precision, TrainingPrecision)
        if self.warmup_steps is not None and self.warmup_steps > self.max_steps:
            raise ValueError(f"warmup_steps={self.warmup_steps} (--warmup-steps) is more than max_steps="
                             f"{self.max_steps} (--max-steps); expected 0 to {self.max_steps}")

    @property
    def warmup(self) -> int:
        return self.warmup_steps if self.warmup_steps is not None else max(1, self.max_steps // 10)
