"""Entity-level F1 and per-entity reports with seqeval, for every tagging scheme we accept; the
taggers' ``score`` and ``report`` against seqeval on the same predictions."""

from __future__ import annotations

import warnings

import pytest
from seqeval.metrics import classification_report
from seqeval.scheme import BILOU

from contextembed.sklearn import (
    BiLSTMCRFTagger,
    SequenceTagger,
    TokenEmbedder,
    detect_scheme,
    entity_f1,
    entity_report,
    format_report,
)


def test_detect_scheme():
    assert detect_scheme([["I-PER", "I-PER", "O", "B-PER"]]) == "IOB1"
    assert detect_scheme([["B-PER", "I-PER", "O", "B-LOC"]]) == "IOB2"
    assert detect_scheme([["B-PER", "L-PER", "U-LOC"]]) == "BILOU"
    assert detect_scheme([["B-PER", "E-PER", "S-LOC"]]) == "IOBES"
    assert detect_scheme([["O", "O"]]) == "IOB2"
    assert detect_scheme([["PER", "PER", "O", "LOC"]]) == "IO"
    assert detect_scheme([["GPE-LOC", "O"], ["B", "MISC"]]) == "IO"  # bare types, a dash inside one included


@pytest.mark.parametrize("tag_lists, names, message", [
    ([[["PER", "O"], ["O", "B-LOC"]]], ("y",), r"tag 'PER' \(y sentence 0, token 0\) has no scheme prefix, but tag "
                                             r"'B-LOC' \(y sentence 1, token 1\) has one"),
    ([[["B-PER", "I-PER"]], [["O", "LOC"]]], ("y_true", "y_pred"),
     r"tag 'LOC' \(y_pred sentence 0, token 1\) .* tag 'B-PER' \(y_true sentence 0, token 0\)"),
    ([[["I-PER", "ORG"]]], (), r"tag 'ORG' \(sentence 0, token 1\)"),
    ([[["I-PER"]], [["ORG"]]], (), r"tag 'ORG' \(tag list 1 sentence 0, token 0\)"),
    ([[["PER", "O"], ["PER", ""]]], ("y",), r"tag '' \(y sentence 1, token 1\) is empty"),
    ([[["PER", "O"], ["PER", " "]]], ("y",), r"tag ' ' \(y sentence 1, token 1\) is blank; every token needs a tag"),
    ([[["B-PER", "\t\n"]]], (), r"tag '\\t\\n' \(sentence 0, token 1\) is blank"),
])
def test_a_mix_of_prefixed_and_bare_tags_is_an_error_naming_both(tag_lists, names, message):
    with pytest.raises(ValueError, match=message):
        detect_scheme(*tag_lists, names=names)


def test_io_tags_are_scored_and_reported_by_their_types():
    """Issue 38 item 3: bare PER/LOC tags used to be read as prefix P + type ER."""
    gold = [["PER", "PER", "O", "LOC", "O", "ORG"]]
    pred = [["PER", "PER", "O", "ORG", "MISC", "O"]]
    assert entity_f1(gold, pred) == pytest.approx(1 / 3)
    report = entity_report(gold, pred)
    assert list(report) == ["LOC", "MISC", "ORG", "PER", "micro avg", "macro avg", "weighted avg"]
    assert report["PER"] == {"precision": 1.0, "recall": 1.0, "f1-score": 1.0, "support": 1}
    assert report["LOC"]["support"] == 1 and report["LOC"]["recall"] == 0.0
    # against seqeval on the same entities written as IOB2 (a run of one type is one entity in IO)
    iob2 = _plain(classification_report([["B-PER", "I-PER", "O", "B-LOC", "O", "B-ORG"]],
                                        [["B-PER", "I-PER", "O", "B-ORG", "B-MISC", "O"]], output_dict=True,
                                        zero_division=0))
    assert report == iob2
    assert entity_report(gold, pred, scheme="IO") == report


def test_a_wrong_or_unknown_scheme_for_the_tags_is_refused():
    with pytest.raises(ValueError, match="scheme='IOB2' reads a prefix .* these tags have none"):
        entity_f1([["PER", "O"]], [["PER", "O"]], scheme="IOB2")
    with pytest.raises(ValueError, match=r"scheme='IO' takes tags without a prefix, but y_pred sentence 0, token 1 is "
                                         r"'B-LOC'"):
        entity_f1([["O", "O"]], [["O", "B-LOC"]], scheme="IO")
    with pytest.raises(ValueError, match="scheme='BIO' is not one of 'IO', 'IOB1'"):
        entity_report([["B-PER"]], [["B-PER"]], scheme="BIO")
    with pytest.raises(ValueError, match=r"tag 'LOC' \(y_pred sentence 0, token 0\) has no scheme prefix"):
        entity_f1([["B-PER"]], [["LOC"]])


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


# -- reports ------------------------------------------------------------------------------------


def _plain(report: dict) -> dict:
    """seqeval's report with its NumPy numbers as Python ones (equal values compare equal)."""
    return {name: {key: value.item() if hasattr(value, "item") else value for key, value in row.items()}
            for name, row in report.items()}


def _check_types(report: dict) -> None:
    for row in report.values():
        assert set(row) == {"precision", "recall", "f1-score", "support"}
        assert type(row["support"]) is int
        assert all(type(row[key]) is float for key in ("precision", "recall", "f1-score"))


@pytest.mark.parametrize("scheme", sorted(CASES))
def test_entity_report_is_seqevals_with_the_scores_options(scheme):
    gold, pred = CASES[scheme]
    report = entity_report(gold, pred)
    options = {"mode": "strict", "scheme": BILOU} if scheme == "BILOU" else {}  # as entity_f1 reads them
    assert report == _plain(classification_report(gold, pred, output_dict=True, zero_division=0, **options))
    assert list(report)[-3:] == ["micro avg", "macro avg", "weighted avg"]
    assert report["micro avg"]["f1-score"] == pytest.approx(entity_f1(gold, pred))
    assert report["PER"] == {"precision": 1.0, "recall": 1.0, "f1-score": 1.0, "support": 1}
    assert report["MISC"]["support"] == 0 and report["LOC"]["recall"] == 0.0
    _check_types(report)


def test_iob1_is_read_as_the_score_reads_it():
    """IOB1's I-X after O opens an entity: seqeval's default mode (what score uses), not strict IOB2."""
    gold = [["I-PER", "I-PER", "O", "I-LOC"]]
    report = entity_report(gold, gold)
    assert report["PER"]["support"] == 1 and report["LOC"]["support"] == 1
    assert report["micro avg"]["f1-score"] == 1.0 == entity_f1(gold, gold)


def test_a_report_without_any_entity_holds_zeros_not_nan():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        report = entity_report([["O", "O"]], [["O", "O"]])
    assert set(report) == {"micro avg", "macro avg", "weighted avg"}
    assert all(row[key] == 0 for row in report.values() for key in row)
    _check_types(report)


def test_entity_report_rejects_misaligned_input():
    with pytest.raises(ValueError, match="sentence 0: 2 gold tags but 1 predicted"):
        entity_report([["O", "O"]], [["O"]])


def test_format_report_is_a_table():
    gold, pred = CASES["IOB2"]
    lines = format_report(entity_report(gold, pred)).splitlines()
    assert lines[0].split() == ["precision", "recall", "f1-score", "support"]
    assert [line.split()[0] for line in lines[1:5]] == ["LOC", "MISC", "ORG", "PER"]
    assert lines[5] == ""
    assert lines[6].split() == ["micro", "avg", "0.333", "0.333", "0.333", "3"]


@pytest.mark.parametrize("make", [
    lambda path: SequenceTagger(TokenEmbedder(path)),
    lambda path: BiLSTMCRFTagger(TokenEmbedder(path), hidden_size=8, max_epochs=3),
], ids=["SequenceTagger", "BiLSTMCRFTagger"])
def test_tagger_report_matches_seqeval_on_its_predictions(static_path, sentences, tags, make):
    tagger = make(static_path).fit(sentences, tags)
    held_out = [["Peter", "rejects", "Britain"], ["The", "EU", "said", "."]]
    gold = [["B-PER", "O", "B-LOC"], ["O", "B-ORG", "O", "O"]]
    report = tagger.report(held_out, gold)
    predicted = tagger.predict(held_out)
    assert report == _plain(classification_report(gold, predicted, output_dict=True, zero_division=0))
    assert report["micro avg"]["f1-score"] == pytest.approx(tagger.score(held_out, gold))
    assert {"LOC", "ORG", "PER"} <= set(report)
    _check_types(report)
    for call in (tagger.report, tagger.score):
        with pytest.raises(ValueError, match="sentence 1 has 4 tokens but 3 tags; every token needs exactly one tag"):
            call(held_out, [gold[0], gold[1][:3]])
        with pytest.raises(ValueError, match="X has 2 sentences but y has 1 tag lists"):
            call(held_out, gold[:1])
        with pytest.raises(TypeError, match=r"sentence 0, token 2: the label is NoneType \(None\); expected a str tag"):
            call(held_out, [["B-PER", "O", None], gold[1]])
        with pytest.raises(ValueError, match=f"{type(tagger).__name__} requires y to be passed"):
            call(held_out, None)
        with pytest.raises(TypeError, match=r"y\[0\] is str \('B-PER'\); expected one tag list per sentence of X"):
            call([["Peter"], ["EU"]], ["B-PER", "B-ORG"])  # one tag per token, flat: not a tagger's y
        with pytest.raises(ValueError, match=r"[ ]?(score|report) needs at least one sentence; X is empty"):
            call([], [])  # seqeval's TypeError "Found input variables without list of list"
        with pytest.raises(ValueError, match="tag ' ' .* is blank"):
            call(held_out, [gold[0], ["O", " ", "O", "O"]])
    assert tagger.score([[]], [[]]) == 0.0  # a sentence without tokens: nothing found, nothing missed
    with pytest.raises(ValueError, match="tag ' ' .* is blank"):
        make(static_path).fit(sentences, [tags[0][:-1] + [" "]] + tags[1:])


@pytest.mark.parametrize("score", [entity_f1, entity_report])
def test_nothing_to_score_is_a_value_error(score):
    with pytest.raises(ValueError, match="y_true and y_pred hold no sentence: there is nothing to score"):
        score([], [])
