"""The numeric settings of the spaCy config, each checked where its builder runs.

spaCy (confection) validates a config value against the builder's annotation but passes on the
value as written: an unquoted ``nan``, ``inf`` or ``٣`` in a config file reaches the builder as a
string (``float("nan")`` and ``int("٣")`` accept it, so validation passes). Each builder therefore
checks its numbers with :func:`contextembed._inputs.bounds.check_values`, which refuses a string, a bool,
NaN and infinity, naming the setting. Ranges that depend on the model (a ``window`` longer than it
takes) are checked when the encoder loads.
"""

from __future__ import annotations

from .._inputs.bounds import Bound

_LARGEST = 10**9

#: the component's feature cache, in megabytes
CACHE_MB = Bound(float, 0, 2**30, note="megabytes; 0: no cache")
#: the arguments of ``contextembed.Encoder.v1`` / ``v2`` that are numbers
ENCODER_BOUNDS: dict[str, Bound] = {
    "window": Bound(int, 1, _LARGEST, optional=True, note="pieces; null: the model's maximum"),
    "stride": Bound(int, 1, _LARGEST, optional=True, note="pieces; null: half the window"),
    "batch_tokens": Bound(int, 1, _LARGEST, optional=True, note="pieces; null: the encoder's default"),
}


__all__ = ["CACHE_MB", "ENCODER_BOUNDS"]
