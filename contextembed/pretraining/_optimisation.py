"""The optimisation of a pretraining run: AdamW, its learning-rate schedule and the gradient scaler.

AdamW without weight decay on biases and norm weights (:func:`make_optimizer`); the learning rate
rises linearly over the warmup to its peak, then falls linearly to zero at ``max_steps``
(:func:`linear_schedule`), a function of the step and the current options alone, so a resumed run
follows its own settings (:func:`make_scheduler`); fp16 runs with a gradient scaler.
:class:`Optimisation` holds the three, takes one clipped update and is what a checkpoint keeps
besides the model's weights (:mod:`contextembed.pretraining._training` runs the loop).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import torch

from .._runtime.devices import PRECISIONS
from ._training_options import TrainingOptions


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


def make_scheduler(optimizer: torch.optim.Optimizer, options: TrainingOptions,
                   step: int = 0) -> torch.optim.lr_scheduler.LambdaLR:
    """The schedule of ``options`` (peak ``learning_rate``), positioned at ``step``.

    The schedule is a function of the step and the current options alone, so a resumed run follows
    its own ``max_steps`` and ``learning_rate`` (a lower ``--lr`` after a divergence takes effect).
    """
    warmup, total = options.warmup, options.max_steps
    for group in optimizer.param_groups:
        group["initial_lr"] = options.learning_rate
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda at: linear_schedule(at, warmup, total),
                                             last_epoch=step - 1)


@dataclass
class Optimisation:
    """AdamW, its learning-rate schedule and the gradient scaler (enabled for fp16): the state a
    checkpoint keeps besides the model's."""

    optimizer: torch.optim.AdamW
    scheduler: torch.optim.lr_scheduler.LambdaLR
    scaler: torch.amp.GradScaler

    @classmethod
    def create(cls, model: torch.nn.Module, options: TrainingOptions, device: torch.device) -> "Optimisation":
        optimizer = make_optimizer(model, options)
        scheduler = make_scheduler(optimizer, options)
        scaler = torch.amp.GradScaler(device.type, enabled=PRECISIONS[options.precision] == torch.float16)
        return cls(optimizer, scheduler, scaler)

    @property
    def learning_rate(self) -> float:
        return self.scheduler.get_last_lr()[0]

    def step(self, parameters: Iterable[torch.nn.Parameter], max_grad_norm: float) -> None:
        """Clip the (unscaled) gradients, update (fp16: skipped when a gradient overflowed), clear the
        gradients, advance the schedule."""
        if max_grad_norm:
            self.scaler.unscale_(self.optimizer)
            torch.nn.utils.clip_grad_norm_(parameters, max_grad_norm)
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.optimizer.zero_grad(set_to_none=True)
        self.scheduler.step()

    def state_dict(self) -> dict:
        return {"optimizer": self.optimizer.state_dict(), "scaler": self.scaler.state_dict()}

    def load_state_dict(self, state: dict, options: TrainingOptions, step: int) -> None:
        """The optimizer's and scaler's state of a checkpoint; the schedule of ``options`` at ``step``."""
        self.optimizer.load_state_dict(state["optimizer"])
        self.scaler.load_state_dict(state["scaler"])
        self.scheduler = make_scheduler(self.optimizer, options, step)
