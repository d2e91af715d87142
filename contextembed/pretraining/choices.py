"""Checking an option whose valid values are a ``Literal`` type (listed once: ``typing.get_args``)."""

from __future__ import annotations

from typing import get_args


def check_choice(name: str, value: object, choices: object) -> str:
    """Return ``value`` if it is one of the ``Literal`` type ``choices``, else raise ``ValueError``.

    Raises
    ------
    ValueError
        Naming the option, the value received and the values expected.
    """
    valid = get_args(choices)
    if not isinstance(value, str) or value not in valid:
        raise ValueError(f"{name}={value!r} is not one of {', '.join(map(repr, valid))}")
    return value
