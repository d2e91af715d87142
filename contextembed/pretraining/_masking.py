"""Dynamic masking for masked language modelling (Devlin et al. 2018).

Every maskable token (not special, not padding) is selected independently with probability
``mask_probability`` (0.15). Of the selected tokens 80% become ``[MASK]``, 10% a token drawn uniformly
from ``random_ids`` (the ordinary, non-special vocabulary; it may by chance be the original token,
as in BERT) and 10% stay unchanged. Only selected tokens are predicted: the others get the label
``-100`` (ignored by ``torch.nn.CrossEntropyLoss``). Masks are drawn anew for every batch (dynamic
masking), from the ``generator`` given, so a seed reproduces them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch

from .._inputs.bounds import Bound, check_settings

IGNORE_INDEX = -100


#: the numeric settings of :class:`MaskingOptions` (see :mod:`.settings`)
MASKING_BOUNDS: dict[str, Bound] = {
    "mask_probability": Bound(float, 0, 1, "--mask-probability", low_open=True, high_open=True),
    "replace_with_mask": Bound(float, 0, 1),
    "replace_with_random": Bound(float, 0, 1),
}


@dataclass(frozen=True)
class MaskingOptions:
    """Probabilities of the BERT masking scheme (defaults: 15%; of those 80/10/10)."""

    mask_probability: float = 0.15
    replace_with_mask: float = 0.8
    replace_with_random: float = 0.1

    def __post_init__(self) -> None:
        check_settings(self, MASKING_BOUNDS)
        if self.replace_with_mask + self.replace_with_random > 1.0:
            raise ValueError(
                f"replace_with_mask={self.replace_with_mask} and replace_with_random={self.replace_with_random} "
                "must sum to at most 1 (the rest stays unchanged)"
            )


def mask_tokens(
    input_ids: torch.Tensor,
    maskable: torch.Tensor,
    *,
    mask_id: int,
    random_ids: torch.Tensor,
    generator: Optional[torch.Generator] = None,
    options: MaskingOptions = MaskingOptions(),
) -> tuple[torch.Tensor, torch.Tensor]:
    """Apply BERT's dynamic masking to a batch.

    Parameters
    ----------
    input_ids : torch.Tensor
        ``(batch, seq)`` int64 token ids.
    maskable : torch.Tensor
        ``(batch, seq)`` bool, True where a token may be selected (False at special tokens and padding).
    mask_id : int
        Id of ``[MASK]``.
    random_ids : torch.Tensor
        ``(n,)`` int64 ids a selected token may be replaced with (the non-special vocabulary).
    generator : torch.Generator, optional
        Source of randomness (CPU generator).
    options : MaskingOptions
        The probabilities.

    Returns
    -------
    inputs : torch.Tensor
        ``(batch, seq)`` the corrupted ids fed to the model.
    labels : torch.Tensor
        ``(batch, seq)`` the original id where a token was selected, ``-100`` elsewhere.
    """
    if input_ids.shape != maskable.shape:
        raise ValueError(f"input_ids {tuple(input_ids.shape)} and maskable {tuple(maskable.shape)} differ in shape")
    if random_ids.numel() == 0:
        raise ValueError("random_ids is empty: the vocabulary has no ordinary (non-special) token")
    shape = input_ids.shape
    # (batch, seq) one uniform draw to select, one to choose the replacement
    selected = (torch.rand(shape, generator=generator) < options.mask_probability) & maskable.cpu()
    choice = torch.rand(shape, generator=generator)
    random_tokens = random_ids.cpu()[torch.randint(len(random_ids), shape, generator=generator)]
    ids = input_ids.cpu()
    to_mask = selected & (choice < options.replace_with_mask)
    to_random = selected & (choice >= options.replace_with_mask) & (
        choice < options.replace_with_mask + options.replace_with_random
    )
    inputs = ids.masked_fill(to_mask, mask_id)
    inputs = torch.where(to_random, random_tokens, inputs)
    labels = ids.masked_fill(~selected, IGNORE_INDEX)
    return inputs.to(input_ids.device), labels.to(input_ids.device)
