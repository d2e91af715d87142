"""Entity-level F1 with seqeval, for every tagging scheme we accept."""

from __future__ import annotations

import pytest

from contextembed.sklearn import detect_scheme, entity_f1


def test_detect_scheme():
    assert detect_scheme([["I-PER", "I-PER", "O", "B-PER"]]) == "IOB1"
    assert detect_scheme([["B-PER", "I-PER", "O", "B-LOC"]]) == "IOB2"
    assert detect_scheme([["B-PER", "L-PER", "U-LOC"]]) == "BILOU"
    assert detect_scheme([["B-PER", "E-PER", "S-LOC"]]) == "IOBES"
    assert detect_scheme([["O", "O"]]) == "IOB2"


# gold has 3 entities (PER "a b", LOC "d", ORG "f"); prediction gets PER right, LOC wrong type,
# and one extra: precision 1/3, recall 1/3 -> F1 1/3
CASES = {
    "IOB1": (
        [["I-PER", "I-PER", "O", "I-LOC", "O", "I-ORG"]],
        [["I-PER", "I-PER", "O", "I-ORG", "I-MISC", "O"]],
    ),
    "IOB2": (
        [["B-PER", "I-PER", "O", "B-LOC", "O", "B-ORG"]],
        [["B-PER", "I-PER", "O", "B-ORG", "B-MISC", "O"]],
    ),
    "BILOU": (
        [["B-PER", "L-PER", "O", "U-LOC", "O", "U-ORG"]],
        [["B-PER", "L-PER", "O", "U-ORG", "U-MISC", "O"]],
    ),
}


@pytest.mark.parametrize("scheme", sorted(CASES))
def test_entity_f1_counts_entities(scheme):
    gold, pred = CASES[scheme]
    assert entity_f1(gold, pred) == pytest.approx(1 / 3)
    assert entity_f1(gold, gold) == 1.0


def test_bilou_partial_span_is_wrong():
    # a B- without its L- is not an entity in strict BILOU
    assert entity_f1([["B-PER", "L-PER"]], [["B-PER", "O"]]) == 0.0


def test_entity_f1_rejects_misaligned_input():
    with pytest.raises(ValueError, match="1 sentences"):
        entity_f1([["O"]], [])
    with pytest.raises(ValueError, match="sentence 0: 2 gold tags but 1 predicted"):
        entity_f1([["O", "O"]], [["O"]])
