"""``contextembed.Listener.v1``: pooled layers for downstream components, trainable scalar mix."""

from __future__ import annotations

import numpy as np
import pytest
import spacy
from spacy.training import Example

from contextembed import load_encoder
from contextembed.spacy._combine_layers import CombineLayers
from contextembed.spacy._scalar_mix import ScalarMix
from spacy_helpers import TRAIN, encoder_config, listener_config, listeners_of, ner_config, ner_examples, tagger_config

TEXT = "Peter Blackburn met EU officials in Brussels"


@pytest.fixture(scope="module")
def encoder(tiny_bert_dir):
    return load_encoder(tiny_bert_dir, device="cpu", precision="fp32")


def listener_outputs(nlp, component_name, docs):
    [listener] = listeners_of(nlp.get_pipe(component_name))
    return listener.predict(docs)


def test_mix_weights_change_after_update(make_nlp):
    nlp = make_nlp(ner={"layers": "all", "combine": "scalar_mix"})
    optimizer = nlp.initialize(lambda: ner_examples(nlp))
    [listener] = listeners_of(nlp.get_pipe("ner"))
    mix = listener.layers[0]
    np.testing.assert_array_equal(mix.get_param("weights"), np.zeros(3))
    assert mix.get_param("gamma").tolist() == [1.0]
    for _ in range(3):
        nlp.update(ner_examples(nlp), sgd=optimizer)
    # moved off their initial values (how far three updates take them depends on the random init)
    assert np.all(mix.get_param("weights") != 0)
    assert mix.get_param("gamma")[0] != 1.0


def test_mix_trains_with_a_frozen_upstream(make_nlp):
    nlp = make_nlp(ner={"layers": [-2, -1]})
    optimizer = nlp.initialize(lambda: ner_examples(nlp))
    [listener] = listeners_of(nlp.get_pipe("ner"))
    mix = listener.layers[0]
    np.testing.assert_array_equal(mix.get_param("weights"), np.zeros(2))
    for _ in range(3):
        nlp.update(ner_examples(nlp), sgd=optimizer, exclude=["contextembed"])
    # every weight got gradients through the frozen component's stored layers (a fixed threshold
    # on how far they moved failed for some random inits: 6.8e-5 after three updates)
    assert np.all(mix.get_param("weights") != 0)


@pytest.mark.parametrize(("layers", "combine"), [([-2, -1], "concat"), ("all", "mean"), ([0, 2], "sum"), ("hidden", "scalar_mix")])
def test_listener_output_matches_numpy(make_nlp, encoder, layers, combine):
    nlp = make_nlp(ner={"layers": layers, "combine": combine})
    nlp.initialize()
    docs = [nlp.make_doc(TEXT), nlp.make_doc("the lazy dog"), nlp.make_doc("")]
    outputs = listener_outputs(nlp, "ner", docs)
    selected = encoder.layer_indexes(layers)
    for doc, output in zip(docs, outputs):
        [hidden] = encoder.encode([[t.text for t in doc]], layers=list(selected))
        expected = {
            "concat": lambda h: np.concatenate(list(h), axis=-1),
            "mean": lambda h: h.mean(axis=0),
            "sum": lambda h: h.sum(axis=0),
            "scalar_mix": lambda h: h.mean(axis=0),  # zero logits, gamma 1: the mean
        }[combine](hidden)
        assert output.shape == (len(doc), expected.shape[1])
        np.testing.assert_allclose(output, expected, rtol=1e-5, atol=1e-6)


def test_scalar_mix_layer_matches_numpy_forward_and_gradient():
    rng = np.random.default_rng(0)
    hidden = rng.normal(size=(3, 5, 4)).astype("f")
    layer = ScalarMix()
    layer.initialize(X=hidden)
    w = np.array([0.5, -1.0, 0.25], dtype="f")
    g = np.array([1.5], dtype="f")
    layer.set_param("weights", w.copy())
    layer.set_param("gamma", g.copy())
    Y, backprop = layer(hidden, is_train=True)
    s = np.exp(w) / np.exp(w).sum()
    mixed = np.tensordot(s, hidden, axes=(0, 0))
    np.testing.assert_allclose(Y, g[0] * mixed, rtol=1e-5)
    dY = rng.normal(size=Y.shape).astype("f")
    dX = backprop(dY)
    assert dX.shape == hidden.shape
    expected_dw = np.array([g[0] * s[j] * np.sum(dY * (hidden[j] - mixed)) for j in range(3)])
    np.testing.assert_allclose(layer.get_grad("weights"), expected_dw, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(layer.get_grad("gamma"), [np.sum(dY * mixed)], rtol=1e-4)


def test_projection_width(make_nlp):
    nlp = make_nlp(ner={"layers": [-1], "combine": "concat", "width": 24})
    optimizer = nlp.initialize(lambda: ner_examples(nlp))
    [listener] = listeners_of(nlp.get_pipe("ner"))
    assert listener.get_dim("nO") == 24
    [output] = listener.predict([nlp.make_doc(TEXT)])
    assert output.shape == (7, 24)
    before = listener.layers[1].get_param("W").copy()
    nlp.update(ner_examples(nlp), sgd=optimizer)
    assert not np.allclose(before, listener.layers[1].get_param("W"))


def test_several_listeners_keep_their_own_mixes(tiny_bert_dir):
    nlp = spacy.blank("en")
    nlp.add_pipe("contextembed", config=encoder_config(tiny_bert_dir))
    nlp.add_pipe("ner", config=ner_config(layers="all"))
    nlp.add_pipe("tagger", config=tagger_config(layers="all"))
    examples = []
    for text, ents in TRAIN:
        doc = nlp.make_doc(text)
        examples.append(Example.from_dict(doc, {"entities": ents, "tags": ["X" if i % 2 else "Y" for i in range(len(doc))]}))
    optimizer = nlp.initialize(lambda: examples)
    [ner_listener] = listeners_of(nlp.get_pipe("ner"))
    [tag_listener] = listeners_of(nlp.get_pipe("tagger"))
    assert nlp.get_pipe("contextembed").listening_components == ["ner", "tagger"]
    for _ in range(3):
        nlp.update(examples, sgd=optimizer)
    ner_w = ner_listener.layers[0].get_param("weights")
    tag_w = tag_listener.layers[0].get_param("weights")
    assert np.all(ner_w != 0) and np.all(tag_w != 0)  # both moved off their initial zeros
    assert not np.allclose(ner_w, tag_w)


def test_textcat_and_spancat_listen(tiny_bert_dir):
    nlp = spacy.blank("en")
    nlp.add_pipe("contextembed", config=encoder_config(tiny_bert_dir))
    nlp.add_pipe("textcat", config={"model": {
        "@architectures": "spacy.TextCatReduce.v1", "exclusive_classes": True, "use_reduce_first": False,
        "use_reduce_last": False, "use_reduce_max": True, "use_reduce_mean": True, "nO": None,
        "tok2vec": listener_config(layers=[-2, -1], width=16)}})
    nlp.add_pipe("spancat", config={"spans_key": "sc", "model": {
        "@architectures": "spacy.SpanCategorizer.v1",
        "reducer": {"@layers": "spacy.mean_max_reducer.v1", "hidden_size": 16},
        "scorer": {"@layers": "spacy.LinearLogistic.v1", "nO": None, "nI": None},
        "tok2vec": listener_config(layers="all")}})
    examples = []
    for i, (text, ents) in enumerate(TRAIN):
        doc = nlp.make_doc(text)
        spans = [(s, e, label) for s, e, label in ents]
        examples.append(Example.from_dict(doc, {"cats": {"A": float(i % 2), "B": float(1 - i % 2)}, "spans": {"sc": spans}}))
    optimizer = nlp.initialize(lambda: examples)
    for _ in range(2):
        losses = nlp.update(examples, sgd=optimizer)
    assert losses["textcat"] > 0 and losses["spancat"] > 0
    for name in ("textcat", "spancat"):
        [listener] = listeners_of(nlp.get_pipe(name))
        assert np.all(listener.layers[0].get_param("weights") != 0)  # moved off its initial zeros
    doc = nlp(TEXT)
    assert set(doc.cats) == {"A", "B"}


def test_listener_cache_is_bounded(make_nlp):
    nlp = make_nlp(ner={"layers": "all"})
    nlp.initialize()
    list(nlp.pipe([TEXT] * 40, batch_size=4))
    [listener] = listeners_of(nlp.get_pipe("ner"))
    assert len(listener.cache._batches) <= 2
    assert sum(len(batch) for batch in listener.cache._batches.values()) <= 8


def test_only_needed_layers_are_encoded(make_nlp, encoder):
    nlp = make_nlp(ner={"layers": [0]}, tensor_layers=-1)
    nlp.initialize()
    component = nlp.get_pipe("contextembed")
    [features] = component.predict([nlp.make_doc(TEXT)])
    assert features.layer_index == (0, encoder.n_layers - 1)
    assert features.data.shape == (2, 7, encoder.width)


# -- readable configuration errors ------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"layers": "last"}, "layers='last' is not understood"),
        ({"layers": [-1, -1]}, "names a layer twice"),
        ({"layers": []}, "selects no layer"),
        ({"combine": "weighted"}, "combine='weighted' is not one of"),
        ({"combine": "concat", "layer_norm": True}, "layer_norm and layer_dropout apply to combine='scalar_mix'"),
        ({"width": 0}, "width must be a positive int"),
    ],
)
def test_bad_listener_options_fail_at_construction(tiny_bert_dir, options, message):
    nlp = spacy.blank("en")
    nlp.add_pipe("contextembed", config=encoder_config(tiny_bert_dir))
    with pytest.raises(ValueError, match=message):
        nlp.add_pipe("ner", config=ner_config(**options))


def test_layer_out_of_range_fails_at_initialize(make_nlp, encoder):
    nlp = make_nlp(ner={"layers": [-20, -1]})
    with pytest.raises(ValueError, match=r"layers=\[-20, -1\] does not fit the encoder .*out of range .* 3 layers"):
        nlp.initialize()


def test_unknown_upstream_fails_at_initialize(make_nlp):
    nlp = make_nlp(ner={"upstream": "encoder2"})
    with pytest.raises(ValueError, match=r"upstream='encoder2'.*contextembed components are \['contextembed'\]"):
        nlp.initialize()


def test_listener_without_component_says_how_to_fix():
    nlp = spacy.blank("en")
    nlp.add_pipe("ner", config=ner_config())
    with pytest.raises(ValueError, match=r"not connected to any 'contextembed' component.*nlp.add_pipe"):
        nlp.initialize()


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"tensor_combine": "scalar_mix"}, "nothing trains them"),
        ({"tensor_combine": "max"}, "combine='max' is not one of"),
        ({"tensor_layers": "top"}, "layers='top' is not understood"),
        ({"subword_pooling": "average"}, r"subword_pooling\s+at root: 'average' is not"),
    ],
)
def test_bad_component_options(tiny_bert_dir, options, message):
    nlp = spacy.blank("en")
    with pytest.raises(ValueError, match=message):
        nlp.add_pipe("contextembed", config={**encoder_config(tiny_bert_dir), **options})


@pytest.mark.parametrize(
    ("section", "name", "written"),
    [
        ("components.contextembed", "cache_mb", "nan"),
        ("components.contextembed", "cache_mb", "inf"),
        ("components.contextembed", "cache_mb", "٣"),
        ("components.contextembed.encoder", "window", "٣"),
        ("components.contextembed.encoder", "stride", "٣"),
        ("components.contextembed.encoder", "batch_tokens", "٣"),
    ],
)
def test_numbers_spacy_passes_on_as_text_are_refused_naming_the_setting(tiny_bert_dir, section, name, written):
    """spaCy validates ``nan`` or ``٣`` (unquoted in a config file) as a number but passes the string
    on; it used to fail in arithmetic with a TypeError that named nothing."""
    from thinc.api import Config

    config = Config().from_str(f"""
[nlp]
lang = "en"
pipeline = ["contextembed"]

[components]

[components.contextembed]
factory = "contextembed"

[components.contextembed.encoder]
@misc = "contextembed.Encoder.v2"
name = "{tiny_bert_dir}"
device = "cpu"
""")
    text = config.to_str().replace(f"[{section}]\n", f"[{section}]\n{name} = {written}\n", 1)
    with pytest.raises(TypeError, match=f"{name}='{written}' is a str; expected"):
        spacy.util.load_model_from_config(Config().from_str(text), auto_fill=True)


def test_bad_config_types_are_reported_by_spacy(tiny_bert_dir):
    nlp = spacy.blank("en")
    with pytest.raises(Exception, match="precision"):
        nlp.add_pipe("contextembed", config=encoder_config(tiny_bert_dir, precision="fp64"))


@pytest.mark.parametrize("combine", ["concat", "mean", "sum", "scalar_mix"])
def test_pooling_layer_agrees_with_the_core_module(combine):
    import torch

    from contextembed.pooling import LayerPooling

    hidden = np.random.default_rng(1).normal(size=(3, 6, 5)).astype("f")
    layer = ScalarMix() if combine == "scalar_mix" else CombineLayers(combine)
    layer.initialize(X=hidden)
    Y = layer.predict(hidden)
    with torch.no_grad():
        expected = LayerPooling(3, "all", combine)(torch.from_numpy(hidden)).numpy()
    assert Y.shape == expected.shape == (6, layer.get_dim("nO"))
    np.testing.assert_allclose(Y, expected, rtol=1e-6, atol=1e-6)


def test_listener_fallback_with_a_cache_holding_more_layers(make_nlp, encoder):
    nlp = make_nlp(ner={"layers": [-1], "combine": "concat"}, cache_mb=5, tensor_layers="all")
    nlp.initialize()
    doc = nlp(TEXT)  # caches all layers for these tokens
    [listener] = listeners_of(nlp.get_pipe("ner"))
    listener.cache.clear()  # force the fallback through the component's encoder cache
    [output] = listener.predict([doc])
    [hidden] = encoder.encode([[t.text for t in doc]], layers=[-1])
    np.testing.assert_allclose(output, hidden[0], rtol=1e-5, atol=1e-6)


def _v2(pooling: dict, **options) -> dict:
    return {"@architectures": "contextembed.Listener.v2", "pooling": pooling, **options}


def test_listener_v2_takes_its_pooling_from_the_config(make_nlp):
    nlp = make_nlp(ner={"layers": [-2, -1]})
    v1_tree = [node.name for node in listeners_of(nlp.get_pipe("ner"))[0].walk()]
    config = ner_config()
    config["model"]["tok2vec"] = _v2({"@layers": "contextembed.ScalarMix.v1", "layer_dropout": 0.1}, layers=[-2, -1])
    nlp2 = make_nlp()
    nlp2.add_pipe("ner", config=config)
    [listener] = listeners_of(nlp2.get_pipe("ner"))
    assert [node.name for node in listener.walk()] == ["contextembed_listener", "contextembed_scalar_mix"]
    assert listener.layers[0].attrs["layer_dropout"] == 0.1
    # Listener.v1 builds the same tree as before the pooling became a config sub-layer, so that
    # pipelines saved with it load by their node names
    assert v1_tree == ["contextembed_listener", "contextembed_scalar_mix"]


@pytest.mark.parametrize("layer, nO", [("contextembed.ConcatLayers.v1", 64), ("contextembed.MeanLayers.v1", 32),
                                       ("contextembed.SumLayers.v1", 32)])
def test_listener_v2_with_fixed_poolings_matches_v1(make_nlp, encoder, layer, nO):
    combine = {"contextembed.ConcatLayers.v1": "concat", "contextembed.MeanLayers.v1": "mean",
               "contextembed.SumLayers.v1": "sum"}[layer]
    v1 = make_nlp(ner={"layers": [-2, -1], "combine": combine})
    v1.initialize()
    v2 = make_nlp()
    config = ner_config()
    config["model"]["tok2vec"] = _v2({"@layers": layer}, layers=[-2, -1])
    v2.add_pipe("ner", config=config)
    v2.initialize()
    doc1, doc2 = v1.make_doc(TEXT), v2.make_doc(TEXT)
    [a], [b] = listeners_of(v1.get_pipe("ner"))[0].predict([doc1]), listeners_of(v2.get_pipe("ner"))[0].predict([doc2])
    assert a.shape == b.shape == (len(doc1), nO)
    np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)


def test_scalar_mix_layer_options_are_checked():
    with pytest.raises(ValueError, match=r"layer_dropout must be in \[0, 1\)"):
        ScalarMix(layer_dropout=1.5)
    with pytest.raises(ValueError, match="'scalar_mix' has trainable weights"):
        CombineLayers("scalar_mix")
