"""The random streams of a pretraining run, each derived from the run's one ``seed``.

Every stream has its own seed, so that adding draws to one never shifts another, and a resumed run
(which starts the streams again at its step) sees what an uninterrupted run would have seen.

=========================================  =====================================  ==========================
stream                                     seeded with                            drawn in
=========================================  =====================================  ==========================
model initialisation (torch's generator)   ``seed``                               :mod:`.outline`
order of the examples of epoch ``e``       ``mix(seed, e)``                       :mod:`.training`
masks of micro-batch ``i`` on rank ``r``   ``mix(seed, MASK_STREAM, i, r)``       :mod:`.training`
dropout from step ``s`` on rank ``r``      ``mix(seed, DROPOUT_STREAM, s, r)``    :mod:`.training`
NSP pairs of epoch ``e``                   ``seed * NSP_PAIRS_FACTOR + e``        :mod:`.mlm`
held-out batches (their NSP pairs, masks)  ``seed + HELD_OUT_OFFSET``             :mod:`.mlm`
word2vec subsampling, windows, order       ``seed`` (NumPy generator)             :mod:`.static`
word2vec negative samples                  ``seed`` (torch generator)             :mod:`.static`
=========================================  =====================================  ==========================

The numbers below are part of what a seed means: changing one changes every run's results and what
resuming an existing checkpoint sees.
"""

from __future__ import annotations

#: tag of the masking stream: one ``torch.Generator`` per micro-batch and rank
MASK_STREAM = 7
#: tag of the dropout stream: torch's global generator, re-seeded where a run starts or resumes
DROPOUT_STREAM = 11
#: NSP pairs (which segment follows which) of epoch ``e`` are drawn from ``seed * 7919 + e``
NSP_PAIRS_FACTOR = 7919
#: the fixed held-out batches (NSP pairs and masks) are drawn from ``seed + 12345``
HELD_OUT_OFFSET = 12345

#: :func:`mix` reads its parts as the digits of a number in this base, modulo ``_MODULUS``
_BASE = 1_000_003
_MODULUS = 2**62


def mix(*parts: int) -> int:
    """One seed from several integers: ``parts`` as digits in base 1,000,003, modulo ``2**62``."""
    value = 0
    for part in parts:
        value = (value * _BASE + int(part)) % _MODULUS
    return value


def data_order_seed(seed: int, epoch: int) -> int:
    """Seed of the order in which ``epoch`` visits the training examples."""
    return mix(seed, epoch)


def mask_seed(seed: int, micro_batch: int, rank: int) -> int:
    """Seed of the masks of global micro-batch number ``micro_batch`` on process ``rank``."""
    return mix(seed, MASK_STREAM, micro_batch, rank)


def dropout_seed(seed: int, step: int, rank: int) -> int:
    """Seed of torch's global generator (dropout) for a run that starts or resumes at ``step``."""
    return mix(seed, DROPOUT_STREAM, step, rank)


def nsp_pairs_seed(seed: int, epoch: int) -> int:
    """Seed of the next-sentence pairs of ``epoch``."""
    return seed * NSP_PAIRS_FACTOR + epoch


def held_out_seed(seed: int) -> int:
    """Seed of the fixed held-out batches (their NSP pairs and masks)."""
    return seed + HELD_OUT_OFFSET
