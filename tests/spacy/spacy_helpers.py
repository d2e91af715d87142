"""Helpers for the spaCy adapter tests: configs of small pipelines over the tiny random BERT."""

from __future__ import annotations

import contextembed.spacy  # noqa: F401  (registers the factory and architectures)
from spacy.training import Example

TRAIN = [
    ("Peter Blackburn met EU officials in Brussels", [(0, 15, "PER"), (20, 22, "ORG"), (36, 44, "LOC")]),
    ("the quick brown fox jumps over the lazy dog", []),
    ("New York Times reported behaviour in Washington", [(0, 14, "ORG"), (37, 47, "LOC")]),
]


def listener_config(**options) -> dict:
    return {"@architectures": "contextembed.Listener.v1", **options}


def ner_config(**listener_options) -> dict:
    return {
        "model": {
            "@architectures": "spacy.TransitionBasedParser.v2",
            "state_type": "ner",
            "extra_state_tokens": False,
            "hidden_width": 16,
            "maxout_pieces": 2,
            "use_upper": True,
            "nO": None,
            "tok2vec": listener_config(**listener_options),
        }
    }


def tagger_config(**listener_options) -> dict:
    return {"model": {"@architectures": "spacy.Tagger.v2", "nO": None, "tok2vec": listener_config(**listener_options)}}


def encoder_config(path, **options) -> dict:
    return {"encoder": {"name": str(path), "device": "cpu", "precision": "fp32", **options}}


def ner_examples(nlp) -> list:
    return [Example.from_dict(nlp.make_doc(text), {"entities": ents}) for text, ents in TRAIN]


def listeners_of(component) -> list:
    from contextembed.spacy import ContextListener

    return [node for node in component.model.walk() if isinstance(node, ContextListener)]
