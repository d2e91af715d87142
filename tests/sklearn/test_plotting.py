"""contextembed.plotting.plot_layer_weights on every estimator that learns a scalar mix (Agg backend):
bar heights are the softmax weights, tick labels name the layers, gamma is shown; an estimator that
learned no weights, and a machine without matplotlib, get errors that say why and what to do."""

from __future__ import annotations

import sys

import numpy as np
import pytest
from sklearn.exceptions import NotFittedError

matplotlib = pytest.importorskip("matplotlib")
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from contextembed.errors import MissingDependencyError  # noqa: E402
from contextembed.plotting import plot_layer_weights  # noqa: E402
from contextembed.sklearn import (  # noqa: E402
    BiLSTMCRFTagger,
    SequenceTagger,
    TextEmbedder,
    TextPairEmbedder,
    TokenEmbedder,
)

CPU = {"device": "cpu", "precision": "fp32"}
MIX = {"layers": "all", "combine": "scalar_mix", **CPU}
TEXTS = ["EU rejects German call", "Peter Blackburn", "BRUSSELS 1996-08-22", "The European Commission said",
         "Germany 's representative", "Fischler proposed EU-wide measures"]
CLASSES = [0, 1, 0, 1, 0, 1]


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def _heights(ax) -> np.ndarray:
    return np.array([patch.get_height() for patch in ax.patches])


def _ticks(ax) -> list[str]:
    return [label.get_text() for label in ax.get_xticklabels()]


def _check_one_mix(ax, weights, gamma, layers=("layer 0", "layer 1", "layer 2")):
    np.testing.assert_allclose(_heights(ax), weights, rtol=1e-6)
    assert _ticks(ax) == list(layers)
    assert f"gamma = {gamma:.3g}" in ax.get_title()
    assert ax.get_ylabel() == "softmax weight"


def test_token_embedder(bert, sentences, tags):
    embedder = TokenEmbedder(bert, **MIX, max_epochs=3).fit(sentences, tags)
    ax = plot_layer_weights(embedder)
    _check_one_mix(ax, embedder.mix_weights_, embedder.gamma_)
    assert "TokenEmbedder('tiny_bert" in ax.get_title()
    np.testing.assert_allclose(_heights(ax).sum(), 1.0, rtol=1e-5)


def test_text_and_pair_embedders(bert):
    text = TextEmbedder(bert, **MIX, max_epochs=3).fit(TEXTS, CLASSES)
    _check_one_mix(plot_layer_weights(text), text.mix_weights_, text.gamma_)
    pairs = list(zip(TEXTS, TEXTS[1:] + TEXTS[:1]))
    pair = TextPairEmbedder(bert, **MIX, max_epochs=3).fit(pairs, CLASSES)
    _check_one_mix(plot_layer_weights(pair), pair.mix_weights_, pair.gamma_)


@pytest.mark.slow
def test_sequence_tagger_on_given_axes(bert, sentences, tags):
    tagger = SequenceTagger(TokenEmbedder(bert, layers=[1, 2], combine="scalar_mix", max_epochs=3, **CPU))
    tagger.fit(sentences, tags)
    figure, axes = plt.subplots(1, 2)
    ax = plot_layer_weights(tagger, ax=axes[1])
    assert ax is axes[1] and not axes[0].patches
    _check_one_mix(ax, tagger.mix_weights_, tagger.gamma_, layers=("layer 1", "layer 2"))


@pytest.mark.slow
def test_bilstm_crf_tagger_with_stacked_mixes(bert, sentences, tags):
    embedders = [TokenEmbedder(bert, **MIX), TokenEmbedder(bert, layers=-1, **CPU),
                 TokenEmbedder(bert, layers=[1, 2], combine="scalar_mix", **CPU)]
    tagger = BiLSTMCRFTagger(embedders, hidden_size=8, max_epochs=2).fit(sentences, tags)
    ax = plot_layer_weights(tagger)
    first, _, third = tagger.mix_weights_
    np.testing.assert_allclose(_heights(ax), np.concatenate([first, third]), rtol=1e-6)
    assert _ticks(ax) == ["layer 0", "layer 1", "layer 2", "layer 1", "layer 2"]
    legend = [text.get_text() for text in ax.get_legend().get_texts()]
    gammas = [tagger.model_state_[f"poolings.{k}.mix.gamma"] for k in (0, 2)]
    assert [f"gamma = {float(g):.3g}" in line for line, g in zip(legend, gammas)] == [True, True]
    assert tagger.mix_gammas_ == [pytest.approx(float(gammas[0])), None, pytest.approx(float(gammas[1]))]


def test_bare_weights():
    ax = plot_layer_weights([0.2, 0.5, 0.3], layer_names=["emb", "mid", "top"], gamma=2.5)
    np.testing.assert_allclose(_heights(ax), [0.2, 0.5, 0.3])
    assert _ticks(ax) == ["emb", "mid", "top"] and "gamma = 2.5" in ax.get_title()


# -- nothing learned ----------------------------------------------------------------------------


@pytest.mark.parametrize("make, fit_with_y, says", [
    (lambda bert: TokenEmbedder(bert, layers="all", combine="concat", **CPU), True,
     r"TokenEmbedder\(combine='concat'\) learned no layer weights: it combines its layers with fixed weights; use "
     r"combine='scalar_mix'"),
    (lambda bert: TokenEmbedder(bert, **MIX), False, r"fitted without labels y, so its weights are equal; fit\(X, y\)"),
    (lambda bert: TokenEmbedder(bert, layers=-1, combine="scalar_mix", **CPU), True,
     r"it selects one layer \(layers=-1\), so there is nothing to weigh"),
    (lambda bert: SequenceTagger(TokenEmbedder(bert, layers=[-2, -1], combine="mean", **CPU)), True,
     r"combine='mean'\) learned no layer weights"),
    (lambda bert: BiLSTMCRFTagger(TokenEmbedder(bert, layers=[-2, -1], combine="concat", **CPU), hidden_size=8,
                                  max_epochs=1), True,
     r"BiLSTMCRFTagger learned no layer weights: its embedders have combine='concat' \(layers=\[-2, -1\]\)"),
], ids=["fixed combine", "no labels", "one layer", "SequenceTagger", "BiLSTMCRFTagger"])
def test_an_estimator_without_learned_weights_is_refused(bert, sentences, tags, make, fit_with_y, says):
    estimator = make(bert)
    estimator.fit(sentences, tags) if fit_with_y else estimator.fit(sentences)
    with pytest.raises(ValueError, match=says):
        plot_layer_weights(estimator)


def test_a_refit_without_labels_forgets_the_learned_weights(bert, sentences, tags):
    embedder = TokenEmbedder(bert, **MIX, max_epochs=2).fit(sentences, tags)
    plot_layer_weights(embedder)
    with pytest.raises(ValueError, match="fitted without labels y"):
        plot_layer_weights(embedder.fit(sentences))


@pytest.mark.slow
def test_a_tagger_refit_with_a_fixed_combine_drops_its_mix(bert, sentences, tags):
    tagger = SequenceTagger(TokenEmbedder(bert, **MIX, max_epochs=2)).fit(sentences, tags)
    assert hasattr(tagger, "mix_weights_")
    tagger.set_params(embedder__combine="concat").fit(sentences, tags)
    assert not hasattr(tagger, "mix_weights_") and not hasattr(tagger, "gamma_")


def test_unfitted_estimators_are_refused(bert):
    for estimator in (TokenEmbedder(bert), SequenceTagger(), BiLSTMCRFTagger()):
        with pytest.raises(NotFittedError):
            plot_layer_weights(estimator)


@pytest.mark.parametrize("weights, options, error, says", [
    ([0.0, 1.3, -0.2], {}, ValueError, r"softmax weights \(finite, non-negative, summing to 1\).*not the mix's logits"),
    ([0.5, float("nan"), 0.5], {}, ValueError, "softmax weights"),
    ([[0.5, 0.5]], {}, ValueError, r"non-empty 1-D array .* got shape \(1, 2\)"),
    ([], {}, ValueError, r"got shape \(0,\)"),
    ([0.5, 0.5], {"layer_names": ["one"]}, ValueError, "layer_names has 1 names for 2 weights"),
    ([0.5, 0.5], {"gamma": float("inf")}, ValueError, "gamma must be a finite number"),
    ("weights", {}, TypeError, "takes a fitted contextembed estimator or an array of layer weights, got str"),
], ids=["logits", "nan", "2-D", "empty", "names", "gamma", "str"])
def test_bad_weights_are_refused(weights, options, error, says):
    with pytest.raises(error, match=says):
        plot_layer_weights(weights, **options)


def test_names_and_gamma_come_from_the_estimator(bert, sentences, tags):
    embedder = TokenEmbedder(bert, **MIX, max_epochs=2).fit(sentences, tags)
    with pytest.raises(TypeError, match="layer_names and gamma are read from the fitted TokenEmbedder"):
        plot_layer_weights(embedder, gamma=1.0)


def test_without_matplotlib_the_error_names_the_plot_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # as if not installed
    with pytest.raises(MissingDependencyError, match=r'pip install "\.\[plot\]"'):
        plot_layer_weights([0.5, 0.5])
