"""Learn a scalar mix for a task: the ELMo recipe with a linear softmax probe.

The frozen layer features are mixed by a :class:`~contextembed.ScalarMix`
(``gamma * sum_k softmax(w)_k * h_k``), optionally joined with extra per-row features and with the
rows of a context window, and fed to one linear layer trained with softmax cross-entropy. Mix and
probe are trained jointly with Adam; training stops early when the loss on a held-out split of the
training data (split by group: whole sentences) stops improving, and the best epoch's mix is kept.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np
import torch
from torch import nn

from ..pooling._layers import ScalarMix
from ._encoding import LayerRows
from ._progress import bar


@dataclass
class ProbeSettings:
    """Training settings of the mix-learning probe."""

    max_epochs: int = 20
    validation_fraction: float = 0.1
    patience: int = 3
    batch_size: int = 1024
    lr: float = 1e-2
    mix_lr: float = 1e-2
    random_state: int = 0


@dataclass
class MixResult:
    """What the probe learned: ``weights`` are the mix logits ``w`` (``(layers,)``), ``gamma`` a float."""

    weights: np.ndarray
    gamma: float
    epochs: int
    best_loss: float


class _MixProbe(nn.Module):
    """Scalar mix -> (row features ++ extra) over a window -> linear logits.

    With ``interactions`` the window is a pair of rows ``(u, v)`` joined as InferSent does:
    ``[u; v; |u - v|; u * v]``.
    """

    def __init__(self, n_layers: int, width: int, n_extra: int, n_window: int, n_classes: int,
                 interactions: bool = False, normalize: bool = False) -> None:
        super().__init__()
        self.normalize = normalize
        if interactions and n_window != 2:
            raise ValueError(f"interactions join a pair of rows, got windows of {n_window}")
        self.mix = ScalarMix(n_layers)
        self.interactions = interactions
        self.linear = nn.Linear((4 if interactions else n_window) * (width + n_extra), n_classes)

    def forward(self, hidden: torch.Tensor, extra: Optional[torch.Tensor], present: torch.Tensor) -> torch.Tensor:
        """``hidden (layers, batch * n_window, width)``, ``extra (batch * n_window, n_extra)``,
        ``present (batch * n_window,)`` -> logits ``(batch, classes)``."""
        # (batch * n_window, width)
        mixed = self.mix(hidden)
        if self.normalize:
            mixed = nn.functional.normalize(mixed, dim=-1)
        if extra is not None:
            mixed = torch.cat([mixed, extra], dim=-1)
        mixed = mixed * present.unsqueeze(-1)
        if self.interactions:
            # (batch, 2, width) -> (batch, 4 * width)
            u, v = mixed.reshape(-1, 2, mixed.shape[-1]).unbind(1)
            return self.linear(torch.cat([u, v, (u - v).abs(), u * v], dim=-1))
        # (batch, n_window * (width + n_extra))
        flat = mixed.reshape(-1, self.linear.in_features)
        return self.linear(flat)


def learn_mix(
    hidden: np.ndarray,
    labels: np.ndarray,
    groups: np.ndarray,
    *,
    extra: Optional[np.ndarray] = None,
    window: Optional[np.ndarray] = None,
    interactions: bool = False,
    normalize: bool = False,
    settings: ProbeSettings = ProbeSettings(),
    show_progress: bool = False,
) -> MixResult:
    """Train mix + linear probe on frozen features; return the mix of the best validation epoch.

    Parameters
    ----------
    hidden : LayerRows or np.ndarray
        The selected layers of every row (token or text), read a batch at a time
        (:class:`~contextembed.sklearn._encoding.LayerRows`), or an array ``(layers, rows, width)``
        float32 of them.
    labels : np.ndarray
        ``(rows,)`` int64 class indexes in ``[0, classes)``.
    groups : np.ndarray
        ``(rows,)`` group ids (sentence of each token); the validation split takes whole groups.
    extra : np.ndarray, optional
        ``(rows, n_extra)`` float32 features joined to the mixed vector (e.g. word shape).
    window : np.ndarray, optional
        ``(examples, n_window)`` int64 rows of ``hidden`` that make each example (a token's
        neighbours, ``-1`` beyond the edge: :func:`contextembed.sklearn._tagger_features.window_index`; or a
        pair's two sides); ``labels`` and ``groups`` are then per example. Default: each row alone.
    interactions : bool
        Join a two-row window as ``[u; v; |u - v|; u * v]`` (sentence pairs) instead of side by side.
    normalize : bool
        Scale each mixed row to unit length before the linear layer, as the features will be.
    settings : ProbeSettings
    show_progress : bool
        A bar over the epochs (on stderr), with the held-out loss.
    """
    hidden = hidden if isinstance(hidden, LayerRows) else LayerRows(hidden)
    n_layers, n_rows, width = hidden.n_layers, hidden.n_rows, hidden.width
    if window is None:
        window = np.arange(n_rows, dtype=np.int64)[:, None]
    train_rows, valid_rows = _split(groups, settings.validation_fraction, settings.random_state)
    n_classes = int(labels.max()) + 1
    generator = torch.Generator().manual_seed(settings.random_state)
    torch.manual_seed(settings.random_state)
    probe = _MixProbe(n_layers, width, 0 if extra is None else extra.shape[1], window.shape[1], n_classes, interactions, normalize)
    optimizer = torch.optim.Adam(
        [
            {"params": probe.mix.parameters(), "lr": settings.mix_lr},
            {"params": probe.linear.parameters(), "lr": settings.lr},
        ]
    )
    data = _Data(hidden, extra, window, labels)
    best = (np.inf, probe.mix.weights.detach().clone(), probe.mix.gamma.detach().clone(), 0)
    stale = 0
    epoch = 0
    # small training sets get smaller batches, so that every epoch takes at least ~32 steps
    batch_size = max(8, min(settings.batch_size, -(-len(train_rows) // 32)))
    with bar(show_progress, "scalar mix", "epoch", total=settings.max_epochs) as progress:
        for epoch in range(1, settings.max_epochs + 1):
            _train_epoch(probe, optimizer, data, train_rows, batch_size, generator)
            loss = _evaluate(probe, data, valid_rows)
            progress.set_postfix(valid_loss=f"{loss:.4f}", refresh=False)
            progress.update()
            if loss < best[0] - 1e-4:
                best = (loss, probe.mix.weights.detach().clone(), probe.mix.gamma.detach().clone(), epoch)
                stale = 0
            else:
                stale += 1
                if stale >= settings.patience:
                    break
    return MixResult(best[1].numpy().astype(np.float32), float(best[2]), best[3], float(best[0]))


@dataclass
class _Data:
    hidden: "LayerRows"
    extra: Optional[np.ndarray]
    window: np.ndarray
    labels: np.ndarray

    def batch(self, rows: np.ndarray):
        # (batch, n_window) neighbours; -1 -> absent
        neighbours = self.window[rows].reshape(-1)
        present = torch.from_numpy((neighbours >= 0).astype(np.float32))
        index = torch.from_numpy(np.maximum(neighbours, 0))
        # (layers, batch * n_window, width)
        hidden = self.hidden.take(index.numpy())
        extra = None if self.extra is None else torch.from_numpy(self.extra[np.maximum(neighbours, 0)])
        return hidden, extra, present, torch.from_numpy(self.labels[rows])


def _split(groups: np.ndarray, fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Rows of the training and validation parts; whole groups go to one side."""
    unique = np.unique(groups)
    rng = np.random.default_rng(seed)
    n_valid = int(round(fraction * len(unique)))
    if len(unique) < 2 or n_valid == 0:
        rows = np.arange(len(groups))
        return rows, rows  # too little data to hold any out: validate on the training rows
    n_valid = min(n_valid, len(unique) - 1)
    valid_groups = rng.choice(unique, size=n_valid, replace=False)
    is_valid = np.isin(groups, valid_groups)
    return np.flatnonzero(~is_valid), np.flatnonzero(is_valid)


def _train_epoch(probe, optimizer, data: _Data, rows: np.ndarray, batch_size: int, generator) -> None:
    probe.train()
    order = rows[torch.randperm(len(rows), generator=generator).numpy()]
    loss_fn = nn.CrossEntropyLoss()
    for begin in range(0, len(order), batch_size):
        hidden, extra, present, target = data.batch(order[begin : begin + batch_size])
        optimizer.zero_grad()
        loss = loss_fn(probe(hidden, extra, present), target)
        loss.backward()
        optimizer.step()


@torch.no_grad()
def _evaluate(probe, data: _Data, rows: np.ndarray, batch_size: int = 4096) -> float:
    probe.eval()
    total = 0.0
    loss_fn = nn.CrossEntropyLoss(reduction="sum")
    for begin in range(0, len(rows), batch_size):
        hidden, extra, present, target = data.batch(rows[begin : begin + batch_size])
        total += float(loss_fn(probe(hidden, extra, present), target))
    return total / max(len(rows), 1)
