"""The seed of every random stream is pinned: changing one changes what every seed means (and what
resuming an existing checkpoint sees)."""

from __future__ import annotations

import pytest

from contextembed.pretraining._seeds import (
    data_order_seed,
    dropout_seed,
    held_out_seed,
    mask_seed,
    mix,
    nsp_pairs_seed,
)

BASE, MODULUS = 1_000_003, 2**62


def _digits(*parts: int) -> int:
    """The plain-loop reference: ``parts`` as digits in base 1,000,003, modulo 2**62."""
    value = 0
    for part in parts:
        value = (value * BASE + part) % MODULUS
    return value


@pytest.mark.parametrize("seed", [0, 1, 42, 2**40])
def test_streams_keep_their_numbers(seed):
    assert data_order_seed(seed, 3) == _digits(seed, 3)
    assert mask_seed(seed, 17, 1) == _digits(seed, 7, 17, 1)
    assert dropout_seed(seed, 250, 0) == _digits(seed, 11, 250, 0)
    assert nsp_pairs_seed(seed, 2) == seed * 7919 + 2
    assert held_out_seed(seed) == seed + 12345


def test_mix_of_known_values():
    assert mix(0, 7, 0, 0) == 7 * BASE**2
    assert mix(1, 2) == BASE + 2
    assert mix(2**61, 2**61, 2**61) < MODULUS
