"""Fixtures for the spaCy adapter tests."""

from __future__ import annotations

import pytest

spacy = pytest.importorskip("spacy")

from spacy_helpers import encoder_config, ner_config  # noqa: E402


@pytest.fixture
def make_nlp(tiny_bert_dir):
    """``make_nlp(component_options, ner=listener_options or None)`` -> blank English pipeline."""

    def build(ner=None, **component_options):
        nlp = spacy.blank("en")
        config = {**encoder_config(tiny_bert_dir), **component_options}
        nlp.add_pipe("contextembed", config=config)
        if ner is not None:
            nlp.add_pipe("ner", config=ner_config(**ner))
        return nlp

    return build

