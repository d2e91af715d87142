"""A linear-chain conditional random field with the transitions a tag scheme allows.

For emissions ``e_t(y)`` (one score per token and tag) and transitions ``T[a, b]``, a tag sequence
``y_1..y_n`` scores

    s(y) = start[y_1] + sum_t e_t(y_t) + sum_{t>1} T[y_{t-1}, y_t] + end[y_n]

and ``p(y) = exp(s(y)) / Z`` with ``Z`` summed over all sequences (the forward algorithm). Decoding
takes the highest-scoring sequence (Viterbi). Moves the scheme forbids (IOB2's ``O -> I-PER``,
IOBES's ``B-ORG -> O``, ...) are masked out of both the partition function and decoding: their
scores are fixed at ``-inf``, never learned, so predictions are always valid tag sequences however
large the learned scores grow (a finite penalty such as ``-1e4`` is outweighed by scores a large
learning rate reaches). The forward algorithm's log-sum-exp (:func:`_logsumexp`) is ``-inf`` with a
zero gradient where no allowed path reaches a tag, where torch's own gives a NaN gradient.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Optional

import torch
from torch import nn

#: a tag with a one-letter scheme prefix (``B-PER``, ``I-ORG``, ``E-LOC``, ``L-X``); ``O`` and the IO
#: scheme's bare types (``PER``, ``LOC``) have none
PREFIXED_TAG = re.compile(r"[BIESLU]-.")


class CRF(nn.Module):
    """Linear-chain CRF over ``n_tags`` tags.

    Parameters
    ----------
    n_tags : int
        Number of tags.
    allowed : torch.Tensor, optional
        ``(n_tags + 2, n_tags + 2)`` bool: ``allowed[a, b]`` says whether tag ``b`` may follow
        tag ``a``; row ``n_tags`` is the sequence start and column ``n_tags + 1`` its end (see
        :func:`allowed_transitions`). Default: every move.
    """

    def __init__(self, n_tags: int, allowed: Optional[torch.Tensor] = None) -> None:
        super().__init__()
        if n_tags < 1:
            raise ValueError(f"a CRF needs at least one tag, got n_tags={n_tags}")
        if allowed is None:
            allowed = torch.ones(n_tags + 2, n_tags + 2, dtype=torch.bool)
        if tuple(allowed.shape) != (n_tags + 2, n_tags + 2):
            raise ValueError(f"allowed must be ({n_tags + 2}, {n_tags + 2}) for {n_tags} tags, got {tuple(allowed.shape)}")
        self.n_tags = n_tags
        self.transitions = nn.Parameter(torch.zeros(n_tags, n_tags))
        self.start = nn.Parameter(torch.zeros(n_tags))
        self.end = nn.Parameter(torch.zeros(n_tags))
        self.register_buffer("allowed", allowed.clone())

    def _scores(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Transition, start and end scores with forbidden moves at ``-inf``."""
        n = self.n_tags
        forbidden = torch.tensor(-math.inf, dtype=self.transitions.dtype, device=self.transitions.device)
        transitions = torch.where(self.allowed[:n, :n], self.transitions, forbidden)
        start = torch.where(self.allowed[n, :n], self.start, forbidden)
        end = torch.where(self.allowed[:n, n + 1], self.end, forbidden)
        return transitions, start, end

    def log_likelihood(self, emissions: torch.Tensor, tags: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Log-probability of ``tags`` per sequence.

        Parameters
        ----------
        emissions : torch.Tensor
            ``(batch, seq, tags)`` scores.
        tags : torch.Tensor
            ``(batch, seq)`` int64 gold tags (any value at padded positions).
        mask : torch.Tensor
            ``(batch, seq)`` bool, true at real tokens; every sequence starts with at least one.

        Returns
        -------
        torch.Tensor
            ``(batch,)``: ``s(tags) - log Z``.
        """
        return self._score(emissions, tags, mask) - self._log_partition(emissions, mask)

    def _score(self, emissions: torch.Tensor, tags: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        transitions, start, end = self._scores()
        tags = tags.masked_fill(~mask, 0)
        # (batch, seq)
        emitted = emissions.gather(2, tags.unsqueeze(-1)).squeeze(-1) * mask
        # (batch, seq - 1); padding's moves (tag 0 to tag 0) may be forbidden: left out, not multiplied by 0
        moved = torch.where(mask[:, 1:], transitions[tags[:, :-1], tags[:, 1:]], 0.0)
        lengths = mask.sum(dim=1)
        last = tags.gather(1, (lengths - 1).unsqueeze(1)).squeeze(1)
        return start[tags[:, 0]] + emitted.sum(dim=1) + moved.sum(dim=1) + end[last]

    def _log_partition(self, emissions: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        transitions, start, end = self._scores()
        # (batch, tags): log-sum of the scores of every path ending in each tag
        alpha = start + emissions[:, 0]
        for t in range(1, emissions.shape[1]):
            # (batch, tags, tags) -> (batch, tags)
            step = _logsumexp(alpha.unsqueeze(2) + transitions.unsqueeze(0), dim=1) + emissions[:, t]
            alpha = torch.where(mask[:, t].unsqueeze(1), step, alpha)
        return _logsumexp(alpha + end, dim=1)

    @torch.no_grad()
    def decode(self, emissions: torch.Tensor, mask: torch.Tensor) -> list[list[int]]:
        """Viterbi: the highest-scoring allowed tag sequence of each ``(batch, seq, tags)`` input."""
        transitions, start, end = self._scores()
        score = start + emissions[:, 0]
        history = []
        for t in range(1, emissions.shape[1]):
            # (batch, tags, tags): best previous tag for each current tag
            candidates = score.unsqueeze(2) + transitions.unsqueeze(0)
            best, previous = candidates.max(dim=1)
            history.append(previous)
            score = torch.where(mask[:, t].unsqueeze(1), best + emissions[:, t], score)
        score = score + end
        lengths = mask.sum(dim=1).tolist()
        paths = []
        for b, length in enumerate(lengths):
            tag = int(score[b].argmax())
            path = [tag]
            for t in range(length - 1, 0, -1):
                tag = int(history[t - 1][b, tag])
                path.append(tag)
            paths.append(path[::-1])
        return paths


def _logsumexp(scores: torch.Tensor, dim: int) -> torch.Tensor:
    """``log(sum(exp(scores)))`` along ``dim``: ``-inf`` with a zero gradient where every score is
    ``-inf`` (a tag no allowed path reaches at a step, e.g. IOBES's ``B-X`` right after the start
    when the tags hold no ``O`` or ``S-X``); ``torch.logsumexp``'s gradient is NaN there, even where
    the result is not used (padding)."""
    reached = torch.isfinite(scores).any(dim=dim)
    # zeros stand in for the scores of unreached rows, whose result is replaced by -inf below
    safe = torch.where(reached.unsqueeze(dim), scores, torch.zeros_like(scores))
    return torch.where(reached, torch.logsumexp(safe, dim=dim), -math.inf)


def allowed_transitions(tags: Sequence[str], scheme: str) -> torch.Tensor:
    """Which moves a tag scheme allows: ``(n + 2, n + 2)`` bool, rows/columns ``n`` start, ``n + 1`` end.

    Parameters
    ----------
    tags : sequence of str
        Tag names such as ``"B-PER"``, ``"I-ORG"``, ``"O"``.
    scheme : {"IO", "IOB1", "IOB2", "IOBES", "BILOU"}
        IO (bare types ``PER``, ``LOC`` and ``O``: every move is valid, and neighbouring tokens of
        one type are one entity), IOB1 (CoNLL-2003: an entity starts with ``I-``; ``B-`` marks one
        that starts right after one of the same type), IOB2/BIO (``B-`` starts every entity), IOBES /
        BILOU (with end and single-token tags).

    Raises
    ------
    ValueError
        An unknown scheme, or a tag that does not belong to it.
    """
    if scheme not in _RULES:
        raise ValueError(f"scheme={scheme!r} is not one of {', '.join(map(repr, _RULES))}")
    parsed = [_parse(tag, scheme) for tag in tags]
    n = len(tags)
    allowed = torch.zeros(n + 2, n + 2, dtype=torch.bool)
    start, end = (None, None), ("END", None)
    for b, target in enumerate(parsed):
        allowed[n, b] = _RULES[scheme](start, target)
        allowed[b, n + 1] = _RULES[scheme](target, end)
        for a, source in enumerate(parsed):
            allowed[a, b] = _RULES[scheme](source, target)
    return allowed


def _parse(tag: str, scheme: str) -> tuple[str, Optional[str]]:
    if tag == "O":
        return ("O", None)
    if scheme == "IO":
        if PREFIXED_TAG.match(tag):
            raise ValueError(f"tag {tag!r} is not an IO tag (expected O or a TYPE without a prefix, such as 'PER')")
        return ("I", tag)
    prefix, _, kind = tag.partition("-")
    prefixes = {"IOB1": "IB", "IOB2": "IB", "IOBES": "IBES", "BILOU": "BILU"}[scheme]
    if not kind or len(prefix) != 1 or prefix not in prefixes:
        raise ValueError(f"tag {tag!r} is not an {scheme} tag (expected O or {'/'.join(prefixes)}-TYPE)")
    if scheme == "BILOU":
        prefix = {"L": "E", "U": "S"}.get(prefix, prefix)
    return (prefix, kind)


def _io(source, target) -> bool:
    """IO tags name each token's type alone: every move is valid."""
    return True


def _iob1(source, target) -> bool:
    """Every IOB1 move reads as one chunking. ``B-X`` belongs right after an ``X`` chunk, but after
    anything else it still starts an ``X`` chunk (conlleval and seqeval read it so), and annotated
    data has it: CoNLL-2003's own training file puts ``B-MISC`` after ``O`` (sentence 10,227).
    Forbidding it would make such a sentence's gold path impossible for the CRF."""
    return True


def _iob2(source, target) -> bool:
    (a, a_kind), (b, b_kind) = source, target
    if b == "I":
        return a in ("B", "I") and a_kind == b_kind
    return True


def _iobes(source, target) -> bool:
    (a, a_kind), (b, b_kind) = source, target
    inside = a in ("B", "I")  # an entity is open after a
    if b in ("I", "E"):
        return inside and a_kind == b_kind
    if b == "END":
        return not inside
    return not inside  # O, B, S only when no entity is open


_RULES = {"IO": _io, "IOB1": _iob1, "IOB2": _iob2, "IOBES": _iobes, "BILOU": _iobes}

__all__ = ["CRF", "PREFIXED_TAG", "allowed_transitions"]
