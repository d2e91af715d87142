"""The BERT paper's Table 7 as tagger configurations: the rows of ``feature_based_ner.py`` (this
folder) and of ``benchmarks/ner_table7.py``, which import it as ``examples.table7`` (the repository
root on ``sys.path``). Not part of the library: a configuration table of these two scripts.

Each row of Table 7 is one ``(layers, combine)`` value of :class:`TokenEmbedder`; single-layer
encoders (static vectors) get one row. Every row is trained with the same tagger settings, so the
rows differ only in which layers are used and how they are combined.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Literal, Optional

from contextembed._inputs.options import check_choice
from contextembed.sklearn import BiLSTMCRFTagger, SequenceTagger, TokenEmbedder

#: the two sequence labellers on frozen features: window logistic regression, BiLSTM-CRF
Tagger = Literal["lr", "bilstm_crf"]

LAST_FOUR = [-4, -3, -2, -1]

#: Table 7 rows: name -> TokenEmbedder parameters
TABLE7_ROWS: dict[str, dict] = {
    "embeddings": {"layers": 0, "combine": "concat"},
    "second-to-last hidden": {"layers": -2, "combine": "concat"},
    "last hidden": {"layers": -1, "combine": "concat"},
    "sum last four hidden": {"layers": LAST_FOUR, "combine": "sum"},
    "scalar mix last four": {"layers": LAST_FOUR, "combine": "scalar_mix"},
    "concat last four hidden": {"layers": LAST_FOUR, "combine": "concat"},
    "scalar mix all layers": {"layers": "all", "combine": "scalar_mix"},
}
STATIC_ROWS: dict[str, dict] = {"vectors": {"layers": 0, "combine": "concat"}}


@dataclass
class Row:
    """One measured configuration."""

    encoder: str
    name: str
    tagger: str
    window: int
    shape_features: object
    f1: float
    seconds: float
    mix_weights: Optional[list] = field(default=None)


def table7_configs(n_layers: int) -> dict[str, dict]:
    """The Table 7 rows for an encoder with ``n_layers`` layers ("last four" is clipped to fit)."""
    if n_layers == 1:
        return STATIC_ROWS
    last = list(range(-min(4, n_layers), 0))
    return {name: {**params, "layers": last} if params["layers"] == LAST_FOUR else params
            for name, params in TABLE7_ROWS.items()}


def run_rows(
    encoder: str,
    rows: dict[str, dict],
    train: tuple[Sequence, Sequence],
    dev: tuple[Sequence, Sequence],
    *,
    window: int = 1,
    shape_features="auto",
    classifier=None,
    tagger: Tagger = "lr",
    tagger_options: Optional[dict] = None,
    embedder_options: Optional[dict] = None,
    report: Callable[[Row], None] = lambda row: None,
    fitted: Callable[[Row, object], None] = lambda row, model: None,
) -> Iterator[Row]:
    """Fit a tagger per row on ``train`` and yield its dev entity F1.

    ``tagger="lr"`` is :class:`SequenceTagger` (``window``, ``classifier``); ``"bilstm_crf"`` is
    :class:`BiLSTMCRFTagger` with ``tagger_options`` (``window`` and ``classifier`` do not apply).
    Both get ``shape_features``. ``fitted`` receives each row with its fitted tagger.
    """
    check_choice("tagger", tagger, Tagger)
    for name, params in rows.items():
        start = time.perf_counter()
        embedder = TokenEmbedder(encoder, **params, **(embedder_options or {}))
        if tagger == "lr":
            model = SequenceTagger(embedder, classifier=classifier, window=window, shape_features=shape_features,
                                   **(tagger_options or {}))
        else:
            model = BiLSTMCRFTagger(embedder, shape_features=shape_features, **(tagger_options or {}))
        model.fit(*train)
        f1 = model.score(*dev)
        weights = getattr(model, "mix_weights_", None)
        if tagger == "bilstm_crf":
            weights = weights[0]
        row = Row(encoder, name, tagger, window if tagger == "lr" else 0, shape_features, f1,
                  time.perf_counter() - start, None if weights is None else [round(float(w), 4) for w in weights])
        report(row)
        fitted(row, model)
        yield row


def format_row(row: Row) -> str:
    weights = "" if row.mix_weights is None else " weights " + " ".join(f"{w:.2f}" for w in row.mix_weights)
    return (
        f"{row.encoder:<14} {row.name:<26} {row.tagger:<10} window={row.window} shape={str(row.shape_features):<5} "
        f"dev F1 {100 * row.f1:5.1f}  ({row.seconds:5.0f} s){weights}"
    )
