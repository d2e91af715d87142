"""The CRF against brute force: every tag sequence enumerated, scored with plain Python."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from contextembed.heads import CRF, allowed_transitions

TAGS = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]


def _score(crf, emissions, path) -> float:
    n = crf.n_tags
    if not crf.allowed[n, path[0]] or not crf.allowed[path[-1], n + 1]:
        return -math.inf
    total = float(crf.start[path[0]]) + float(crf.end[path[-1]])
    for t, tag in enumerate(path):
        total += float(emissions[t, tag])
        if t:
            if not crf.allowed[path[t - 1], tag]:
                return -math.inf
            total += float(crf.transitions[path[t - 1], tag])
    return total


def _brute_force(crf, emissions, length):
    with torch.no_grad():
        scores = {path: _score(crf, emissions, path) for path in itertools.product(range(crf.n_tags), repeat=length)}
    finite = [s for s in scores.values() if s > -math.inf]
    log_z = math.log(sum(math.exp(s) for s in finite))
    return scores, log_z, max(scores, key=scores.get)


@pytest.mark.parametrize("scheme", ["IOB1", "IOB2"])
def test_likelihood_and_viterbi_match_brute_force(scheme):
    torch.manual_seed(0)
    crf = CRF(len(TAGS), allowed_transitions(TAGS, scheme))
    with torch.no_grad():
        for parameter in crf.parameters():
            parameter.normal_()
    lengths = [4, 2, 3]
    emissions = torch.randn(len(lengths), max(lengths), len(TAGS))
    mask = torch.arange(max(lengths))[None] < torch.tensor(lengths)[:, None]
    decoded = crf.decode(emissions, mask)
    for b, length in enumerate(lengths):
        scores, log_z, best = _brute_force(crf, emissions[b], length)
        assert decoded[b] == list(best)
        gold = torch.tensor([list(best) + [0] * (max(lengths) - length)])
        got = crf.log_likelihood(emissions[b : b + 1], gold, mask[b : b + 1])
        assert float(got.detach()) == pytest.approx(scores[best] - log_z, abs=1e-4)


def test_forbidden_moves_are_never_decoded_and_carry_no_gradient():
    allowed = allowed_transitions(TAGS, "IOB2")
    crf = CRF(len(TAGS), allowed)
    emissions = torch.zeros(1, 3, len(TAGS))
    emissions[0, :, TAGS.index("I-PER")] = 50.0  # everything pushes towards an invalid I-PER start
    [path] = crf.decode(emissions, torch.ones(1, 3, dtype=torch.bool))
    assert TAGS[path[0]] != "I-PER"
    loss = -crf.log_likelihood(emissions, torch.tensor([[1, 2, 2]]), torch.ones(1, 3, dtype=torch.bool)).sum()
    loss.backward()
    o, i_per = TAGS.index("O"), TAGS.index("I-PER")
    assert float(crf.transitions.grad[o, i_per]) == 0.0 and float(crf.start.grad[i_per]) == 0.0


@pytest.mark.parametrize("scheme, tags, forbidden, permitted", [
    ("IOB1", ["O", "I-PER", "B-PER", "I-LOC"], [],  # B- after O still starts a chunk (CoNLL-2003 has it)
     [("START", "I-PER"), ("I-PER", "B-PER"), ("I-LOC", "I-PER"), ("I-PER", "END"), ("O", "B-PER"),
      ("START", "B-PER"), ("I-LOC", "B-PER")]),
    ("IOB2", ["O", "B-PER", "I-PER", "I-LOC"], [("START", "I-PER"), ("O", "I-PER"), ("B-PER", "I-LOC")],
     [("B-PER", "I-PER"), ("I-PER", "O"), ("I-PER", "END")]),
    ("IOBES", ["O", "B-PER", "I-PER", "E-PER", "S-PER", "E-LOC"],
     [("B-PER", "O"), ("B-PER", "END"), ("O", "E-PER"), ("I-PER", "E-LOC"), ("START", "I-PER")],
     [("B-PER", "E-PER"), ("E-PER", "S-PER"), ("S-PER", "END"), ("I-PER", "I-PER")]),
    ("IO", ["O", "PER", "LOC"], [],  # each token names its type: every move is valid
     [("START", "PER"), ("O", "LOC"), ("PER", "LOC"), ("PER", "PER"), ("LOC", "END"), ("START", "O")]),
    ("BILOU", ["O", "B-PER", "L-PER", "U-PER"], [("B-PER", "O"), ("O", "L-PER")], [("B-PER", "L-PER"), ("U-PER", "B-PER")]),
])
def test_allowed_transitions_per_scheme(scheme, tags, forbidden, permitted):
    allowed = allowed_transitions(tags, scheme)
    n = len(tags)
    index = {**{tag: i for i, tag in enumerate(tags)}, "START": n, "END": n + 1}
    for a, b in forbidden:
        assert not allowed[index[a], index[b]], (a, b)
    for a, b in permitted:
        assert allowed[index[a], index[b]], (a, b)


def test_bad_schemes_and_tags():
    with pytest.raises(ValueError, match="scheme='BIO' is not one of 'IO', 'IOB1'"):
        allowed_transitions(["O"], "BIO")
    with pytest.raises(ValueError, match="tag 'B-PER' is not an IO tag"):
        allowed_transitions(["O", "PER", "B-PER"], "IO")
    with pytest.raises(ValueError, match="tag 'E-PER' is not an IOB2 tag"):
        allowed_transitions(["O", "E-PER"], "IOB2")
    with pytest.raises(ValueError, match=r"allowed must be \(4, 4\)"):
        CRF(2, torch.ones(3, 3, dtype=torch.bool))


def _valid(path, allowed) -> bool:
    n = allowed.shape[0] - 2
    moves = zip([n] + list(path), list(path) + [n + 1])
    return all(bool(allowed[a, b]) for a, b in moves)


@pytest.mark.slow
@pytest.mark.parametrize("scheme", ["IOB2", "IOBES"])
def test_no_learned_score_however_large_makes_a_forbidden_move_win(scheme):
    """Forbidden moves were scored -1e4: allowed scores past that (a learning rate of 1000 reaches
    them) made a sentence start with I-PER under IOB2. Now they are -inf: Viterbi never takes one."""
    tags = TAGS if scheme == "IOB2" else ["O", "B-PER", "I-PER", "E-PER", "S-PER"]
    allowed = allowed_transitions(tags, scheme)
    crf = CRF(len(tags), allowed)
    generator = torch.Generator().manual_seed(0)
    n = len(tags)
    for _ in range(50):
        with torch.no_grad():  # huge learned scores, largest on what the scheme forbids
            for parameter, mask in ((crf.transitions, allowed[:n, :n]), (crf.start, allowed[n, :n]),
                                    (crf.end, allowed[:n, n + 1])):
                parameter.copy_(torch.randn(parameter.shape, generator=generator) * 1e6 - 1e7 * mask)
        emissions = torch.randn(4, 6, n, generator=generator) * 1e6
        mask = torch.arange(6)[None] < torch.tensor([6, 1, 3, 2])[:, None]
        for path in crf.decode(emissions, mask):
            assert _valid(path, allowed), [tags[t] for t in path]


def test_the_likelihood_has_finite_gradients_where_no_allowed_path_reaches_a_tag():
    """IOBES without O or S-X: B-X cannot follow the start's first tag at step 1, so a log-sum-exp
    is over -inf alone there (torch's gradient is NaN), and padding moves B-X -> B-X are forbidden."""
    tags = ["B-PER", "E-PER"]
    crf = CRF(len(tags), allowed_transitions(tags, "IOBES"))
    with torch.no_grad():
        for parameter in crf.parameters():
            parameter.normal_()
    lengths = [4, 2]
    emissions = torch.randn(2, 4, len(tags), requires_grad=True)
    mask = torch.arange(4)[None] < torch.tensor(lengths)[:, None]
    gold = torch.tensor([[0, 1, 0, 1], [0, 1, 0, 0]])
    likelihood = crf.log_likelihood(emissions, gold, mask)
    likelihood.sum().backward()
    assert torch.isfinite(likelihood).all()
    assert all(torch.isfinite(p.grad).all() for p in crf.parameters()) and torch.isfinite(emissions.grad).all()
    for b, length in enumerate(lengths):
        scores, log_z, best = _brute_force(crf, emissions[b].detach(), length)
        path = tuple(gold[b, :length].tolist())
        assert float(likelihood[b].detach()) == pytest.approx(scores[path] - log_z, abs=1e-4)
        assert crf.decode(emissions[b : b + 1].detach(), mask[b : b + 1]) == [list(best)]
