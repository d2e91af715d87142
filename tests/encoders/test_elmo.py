"""ELMo encoder: an independent NumPy forward pass in TF conventions, the original file layout,
statelessness, and every bad-input case."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import numpy as np
import pytest

import torch

h5py = pytest.importorskip("h5py")

from contextembed import load_encoder  # noqa: E402
from contextembed.encoders._elmo import (  # noqa: E402
    BiLMEncoderModule,
    ElmoEncoder,
    ElmoFormatError,
    elmo_options,
    expected_shapes,
    sentence_char_ids,
    word_char_ids,
)
from contextembed.errors import MissingDependencyError, ModelNotFoundError  # noqa: E402
from contextembed.pooling import COMBINES, LayerPooling  # noqa: E402

# small enough for plain loops, odd sizes so that transposes cannot line up by accident
CHAR_DIM, FILTERS, N_HIGHWAY, PROJ, CELL, N_LAYERS = 4, [[1, 4], [2, 5], [3, 6]], 2, 6, 10, 2
CELL_CLIP, PROJ_CLIP = 1.0, 0.8

OPTIONS = {
    "lstm": {"dim": CELL, "projection_dim": PROJ, "n_layers": N_LAYERS, "cell_clip": CELL_CLIP,
             "proj_clip": PROJ_CLIP, "use_skip_connections": True},
    "char_cnn": {"embedding": {"dim": CHAR_DIM}, "filters": FILTERS, "n_highway": N_HIGHWAY,
                 "activation": "tanh", "n_characters": 262, "max_characters_per_token": 50},
    "n_tokens_vocab": 1000,  # bilm-tf training key: kept, unused
}

SENTENCES = [
    ["The", "quick", "brown", "fox", "."],
    ["naïve", "café", "東京", "😀", "Zürich"],
    ["a" * 70, "é" * 30, "x"],  # longer than 48 bytes; a multi-byte character cut in half
    ["one"],
    [],
    ["repeated", "repeated", "words", "repeated", "in", "one", "sentence", "here", "words"],
]


def tf_layout(options: dict, seed: int = 0) -> dict[str, np.ndarray]:
    """Random weights named and shaped as bilm-tf dumps them (written here independently)."""
    rng = np.random.default_rng(seed)
    cnn, lstm = options["char_cnn"], options["lstm"]
    d, f = cnn["embedding"]["dim"], sum(n for _, n in cnn["filters"])
    p, c = lstm["projection_dim"], lstm["dim"]

    def rand(*shape, scale=0.5):
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    weights = {"char_embed": rand(261, d)}
    for i, (width, n) in enumerate(cnn["filters"]):
        weights[f"CNN/W_cnn_{i}"] = rand(1, width, d, n)
        weights[f"CNN/b_cnn_{i}"] = rand(n, scale=0.1)
    for k in range(cnn["n_highway"]):
        for name in ("transform", "carry"):
            weights[f"CNN_high_{k}/W_{name}"] = rand(f, f, scale=0.3)
            weights[f"CNN_high_{k}/b_{name}"] = rand(f, scale=0.3)
    weights["CNN_proj/W_proj"] = rand(f, p)
    weights["CNN_proj/b_proj"] = rand(p, scale=0.1)
    for direction in (0, 1):
        for layer in range(lstm["n_layers"]):
            prefix = f"RNN_{direction}/RNN/MultiRNNCell/Cell{layer}/LSTMCell"
            weights[f"{prefix}/W_0"] = rand(2 * p, 4 * c, scale=0.6)
            weights[f"{prefix}/B"] = rand(4 * c, scale=0.5)
            weights[f"{prefix}/W_P_0"] = rand(c, p, scale=0.6)
    return weights


def write_elmo_dir(path: Path, options: dict, weights: dict[str, np.ndarray]) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / "options.json").write_text(json.dumps(options))
    with h5py.File(path / "weights.hdf5", "w") as handle:
        for name, array in weights.items():
            handle.create_dataset(name, data=array)
    return path


@pytest.fixture(scope="module")
def tf_weights() -> dict[str, np.ndarray]:
    return tf_layout(OPTIONS)


@pytest.fixture(scope="module")
def elmo_dir(tmp_path_factory, tf_weights) -> Path:
    return write_elmo_dir(tmp_path_factory.mktemp("elmo") / "model", OPTIONS, tf_weights)


@pytest.fixture(scope="module")
def elmo(elmo_dir) -> ElmoEncoder:
    return load_encoder(elmo_dir, device="cpu", precision="fp32")


# -- an independent NumPy forward pass, written from the TF conventions ---------------------------


def ref_char_ids(word, marker=None) -> list[int]:
    if marker is not None:
        ids = [258, marker, 259] + [260] * 47
    else:
        data = list(word.encode("utf-8")[:48])
        ids = [258] + data + [259] + [260] * (48 - len(data))
    return [i + 1 for i in ids]


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


class Reference:
    """ELMo forward pass in float64 with plain loops; counts how often each clip binds."""

    def __init__(self, options, weights):
        self.o, self.w = options, {k: v.astype(np.float64) for k, v in weights.items()}
        self.clipped = {"cell": 0, "proj": 0}
        self.act = {"relu": lambda x: np.maximum(x, 0), "tanh": np.tanh}[options["char_cnn"]["activation"]]

    def token(self, ids) -> np.ndarray:
        w, cnn = self.w, self.o["char_cnn"]
        table = np.vstack([np.zeros((1, cnn["embedding"]["dim"])), w["char_embed"]])
        chars = table[ids]  # (50, d)
        features = []
        for i, (width, n) in enumerate(cnn["filters"]):
            kernel = w[f"CNN/W_cnn_{i}"][0]  # (width, d, n)
            best = np.full(n, -np.inf)
            for start in range(50 - width + 1):
                value = w[f"CNN/b_cnn_{i}"].copy()
                for k in range(width):
                    value += chars[start + k] @ kernel[k]
                best = np.maximum(best, value)
            features.append(self.act(best))
        x = np.concatenate(features)
        for k in range(cnn["n_highway"]):
            carry = sigmoid(x @ w[f"CNN_high_{k}/W_carry"] + w[f"CNN_high_{k}/b_carry"])
            transform = np.maximum(x @ w[f"CNN_high_{k}/W_transform"] + w[f"CNN_high_{k}/b_transform"], 0)
            x = carry * transform + (1 - carry) * x
        return x @ w["CNN_proj/W_proj"] + w["CNN_proj/b_proj"]

    def lstm(self, inputs, direction, layer) -> np.ndarray:
        prefix = f"RNN_{direction}/RNN/MultiRNNCell/Cell{layer}/LSTMCell"
        kernel, bias, proj = self.w[f"{prefix}/W_0"], self.w[f"{prefix}/B"], self.w[f"{prefix}/W_P_0"]
        size, cell_clip, proj_clip = self.o["lstm"]["dim"], self.o["lstm"]["cell_clip"], self.o["lstm"]["proj_clip"]
        h, c = np.zeros(proj.shape[1]), np.zeros(size)
        out = []
        for x in inputs:
            z = np.concatenate([x, h]) @ kernel + bias
            i, j, f, o = (z[q * size : (q + 1) * size] for q in range(4))
            c = sigmoid(f + 1.0) * c + sigmoid(i) * np.tanh(j)
            self.clipped["cell"] += int((np.abs(c) > cell_clip).sum())
            c = np.clip(c, -cell_clip, cell_clip)
            h = (sigmoid(o) * np.tanh(c)) @ proj
            self.clipped["proj"] += int((np.abs(h) > proj_clip).sum())
            h = np.clip(h, -proj_clip, proj_clip)
            out.append(h)
        return np.array(out)

    def sentence(self, words) -> np.ndarray:
        """``(n_layers + 1, words, 2 * projection)``."""
        ids = [ref_char_ids(None, 256)] + [ref_char_ids(w) for w in words] + [ref_char_ids(None, 257)]
        tokens = np.array([self.token(i) for i in ids])
        layers = [np.concatenate([tokens, tokens], axis=1)]
        forward, backward = tokens, tokens[::-1]
        for layer in range(self.o["lstm"]["n_layers"]):
            new_forward, new_backward = self.lstm(forward, 0, layer), self.lstm(backward, 1, layer)
            if layer > 0:
                new_forward, new_backward = new_forward + forward, new_backward + backward
            forward, backward = new_forward, new_backward
            layers.append(np.concatenate([forward, backward[::-1]], axis=1))
        return np.stack(layers)[:, 1:-1]


@pytest.fixture(scope="module")
def reference(tf_weights) -> Reference:
    return Reference(OPTIONS, tf_weights)


# -- character ids --------------------------------------------------------------------------------


def test_character_ids_follow_the_reference_layout():
    assert word_char_ids("a").tolist() == [259, 98, 260] + [261] * 47
    long = "a" + "é" * 30  # 61 bytes: the cut after 48 bytes splits an "é"
    ids = word_char_ids(long)
    assert ids.tolist() == ref_char_ids(long)
    assert ids[48] == 0xC3 + 1 and ids[49] == 260  # partial lead byte kept, then end-of-word
    assert word_char_ids("").tolist() == [259, 260] + [261] * 48
    char_ids, lengths = sentence_char_ids([["hi"], []])
    assert lengths.tolist() == [3, 2]
    assert char_ids.shape == (2, 3, 50)
    assert char_ids[0, 0].tolist() == ref_char_ids(None, 256)
    assert char_ids[1, 1].tolist() == ref_char_ids(None, 257)
    assert not char_ids[1, 2].any()  # padding position: all zeros
    assert word_char_ids("<S>").tolist() == ref_char_ids("<S>")  # a word, not the marker


@pytest.mark.parametrize("sentences, error, message", [
    (["the cat", "a dog"], TypeError, r"^sentence 0 is a plain string \('the cat'\); expected a list of tokens"),
    ("the cat", TypeError, r"^expected a list of tokenized sentences \(list of list of str\), got a single string"),
    ([["the", None]], TypeError, r"^sentence 0, word 1 is NoneType \(None\)"),
    ([["a"], ["b", 3]], TypeError, r"^sentence 1, word 1 is int \(3\)"),
    ([["a\ud800b"]], ValueError, r"^sentence 0, word 0 \('a\\ud800b'\) holds '\\ud800' at character 1"),
    (3, TypeError, r"^expected a list of tokenized sentences, got int"),
])
def test_sentence_char_ids_checks_its_input_as_the_encoders_do(elmo, sentences, error, message):
    """Strings were read character by character (``["the cat", "a dog"]``: 7 and 5 "words") and a
    ``None`` token was an AttributeError from inside."""
    with pytest.raises(error, match=message):
        sentence_char_ids(sentences)
    with pytest.raises(error, match=message):
        elmo.encode(sentences)


def test_sentence_char_ids_takes_tuples_and_iterators_as_the_encoders_do():
    expected = sentence_char_ids([["the", "cat"], ["a"]])
    for sentences in ([("the", "cat"), ("a",)], iter([["the", "cat"], ["a"]]), (s for s in [["the", "cat"], ["a"]])):
        for got, want in zip(sentence_char_ids(sentences), expected):
            np.testing.assert_array_equal(got, want)


# -- the forward pass -----------------------------------------------------------------------------


@pytest.mark.parametrize("char_chunk", [256, 2])
def test_matches_numpy_reference(elmo_dir, reference, char_chunk):
    """With small chunks the character CNN runs on truncated slots (short words together)."""
    elmo = ElmoEncoder.load(elmo_dir, device="cpu", precision="fp32")
    elmo.module.token_embedder.chunk_size = char_chunk
    outputs = elmo.encode(SENTENCES)
    for words, out in zip(SENTENCES, outputs):
        assert out.dtype == np.float32
        assert out.shape == (N_LAYERS + 1, len(words), 2 * PROJ)
        if words:
            assert np.abs(out - reference.sentence(words)).max() <= 1e-5
    # the clips were exercised, so the check above covers them
    assert reference.clipped["cell"] > 0 and reference.clipped["proj"] > 0


def test_relu_activation_and_no_clipping(tmp_path):
    options = json.loads(json.dumps(OPTIONS))
    options["char_cnn"]["activation"] = "relu"
    options["char_cnn"]["n_highway"] = 1
    options["lstm"]["cell_clip"] = 0  # 0 and null both mean "no clip"
    options["lstm"]["proj_clip"] = None
    weights = tf_layout(options, seed=3)
    encoder = ElmoEncoder.load(write_elmo_dir(tmp_path / "relu", options, weights), device="cpu", precision="fp32")
    reference = Reference({**options, "lstm": {**options["lstm"], "cell_clip": np.inf, "proj_clip": np.inf}}, weights)
    sentences = SENTENCES[:3]
    for words, out in zip(sentences, encoder.encode(sentences)):
        assert np.abs(out - reference.sentence(words)).max() <= 1e-5


def test_token_layer_is_duplicated(elmo):
    out = elmo.encode([["duplicate", "me"]])[0]
    np.testing.assert_array_equal(out[0, :, :PROJ], out[0, :, PROJ:])


def test_thousand_word_sentence(elmo, reference):
    rng = np.random.default_rng(1)
    words = ["".join(rng.choice(list("abcdeé東"), size=rng.integers(1, 6))) for _ in range(1000)]
    out = elmo.encode([words, ["short"]])
    assert out[0].shape == (N_LAYERS + 1, 1000, 2 * PROJ)
    assert np.abs(out[0] - reference.sentence(words)).max() <= 1e-5


def test_empty_inputs(elmo):
    assert elmo.encode([]) == []
    out = elmo.encode([[], []], layers=[0, -1])
    assert [o.shape for o in out] == [(2, 0, 2 * PROJ)] * 2
    pieces = elmo.encode_pieces([[], ["x", "y"]])
    assert pieces[0].word_offsets.tolist() == [0]
    assert pieces[1].word_offsets.tolist() == [0, 1, 2] and pieces[1].cls is None


def test_independent_of_batch_composition(elmo_dir):
    small_batches = ElmoEncoder.load(elmo_dir, device="cpu", precision="fp32", batch_words=1)  # one sentence per pass
    big_batches = ElmoEncoder.load(elmo_dir, device="cpu", precision="fp32", batch_words=10_000)
    alone = [small_batches.encode([s])[0] for s in SENTENCES]
    together = big_batches.encode(SENTENCES)
    shuffled = big_batches.encode(SENTENCES[::-1] + [["padding", "friends"] * 20])[: len(SENTENCES)][::-1]
    for a, b, c in zip(alone, together, shuffled):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-6)
        np.testing.assert_allclose(a, c, rtol=0, atol=1e-6)


def test_repeated_calls_are_identical(elmo):
    """Stateless: AllenNLP's stateful LSTM would give a different answer the second time."""
    first = elmo.encode(SENTENCES)
    elmo.encode([["something", "else", "in", "between"]] * 3)
    second = elmo.encode(SENTENCES)
    for a, b in zip(first, second):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("layers", ["all", "hidden", 0, -1, [0, 2], [2, 1]])
@pytest.mark.parametrize("combine", COMBINES)
def test_every_layer_pooling(elmo, layers, combine):
    full = elmo.encode(SENTENCES[:2])
    selected = elmo.encode(SENTENCES[:2], layers=layers)
    index = list(elmo.layer_indexes(layers))
    pooling = LayerPooling(elmo.n_layers, layers, combine)
    for f, s in zip(full, selected):
        np.testing.assert_array_equal(s, f[index])
        pooled = pooling(torch.from_numpy(s))
        assert pooled.shape == (s.shape[1], pooling.output_width(elmo.width))
        assert torch.allclose(pooling(torch.from_numpy(f)), pooled)


def test_defaults_and_info(elmo, elmo_dir):
    assert (ElmoEncoder.default_layers, ElmoEncoder.default_combine) == ("all", "scalar_mix")
    info = elmo.info()
    assert info["family"] == "elmo" and info["n_layers"] == N_LAYERS + 1 and info["width"] == 2 * PROJ
    assert info["spec"] == str(elmo_dir) and info["max_length"] is None
    assert not elmo.has_cls and not elmo.is_subword


def test_rejects_untokenized_input(elmo):
    with pytest.raises(TypeError, match="plain string"):
        elmo.encode(["not tokenized"])


# -- the original file layout ---------------------------------------------------------------------


def test_save_load_round_trip(elmo, elmo_dir, tmp_path):
    elmo.save(tmp_path / "copy")
    copy = load_encoder(tmp_path / "copy", device="cpu", precision="fp32")
    for a, b in zip(elmo.encode(SENTENCES), copy.encode(SENTENCES)):
        np.testing.assert_array_equal(a, b)
    with h5py.File(elmo_dir / "weights.hdf5") as original, h5py.File(tmp_path / "copy" / "weights.hdf5") as saved:
        names = set()
        original.visititems(lambda name, obj: names.add(name) if isinstance(obj, h5py.Dataset) else None)
        assert names == set(expected_shapes(OPTIONS))
        for name in names:  # transposes, gate swaps and sign flips undone bit for bit
            np.testing.assert_array_equal(original[name][...], saved[name][...], err_msg=name)
    saved_options = json.loads((tmp_path / "copy" / "options.json").read_text())
    assert saved_options == OPTIONS  # extra bilm-tf keys survive


def test_expected_shapes_of_the_released_small_model():
    shapes = expected_shapes(elmo_options("small"))
    assert shapes["char_embed"] == (261, 16)
    assert shapes["CNN/W_cnn_6"] == (1, 7, 16, 1024)
    assert shapes["CNN_high_0/W_carry"] == (2048, 2048) and "CNN_high_1/W_carry" not in shapes
    assert shapes["CNN_proj/W_proj"] == (2048, 128)
    assert shapes["RNN_1/RNN/MultiRNNCell/Cell1/LSTMCell/W_0"] == (256, 4096)
    assert shapes["RNN_0/RNN/MultiRNNCell/Cell0/LSTMCell/W_P_0"] == (1024, 128)
    assert expected_shapes(elmo_options("original"))["CNN_high_1/b_carry"] == (2048,)


@pytest.mark.parametrize("options", [OPTIONS, elmo_options("tiny")], ids=["test", "tiny"])
def test_expected_shapes_match_the_module_layout(options, tf_weights):
    from contextembed.encoders._elmo.weights import weight_specs

    module = BiLMEncoderModule(options, init=False)
    assert expected_shapes(options) == {spec.dataset: spec.shape for spec in weight_specs(module)}
    if options is OPTIONS:  # and the layout written independently by the fixture
        assert expected_shapes(options) == {name: array.shape for name, array in tf_weights.items()}


def test_pretrained_module_and_release_are_interchangeable(tmp_path):
    """A module built from a preset (as the pretrainer does) saves to a directory load_encoder reads."""
    torch.manual_seed(0)
    module = BiLMEncoderModule(elmo_options("tiny"))
    from contextembed.encoders import save_bilm

    save_bilm(module, tmp_path / "ours")
    encoder = load_encoder(tmp_path / "ours", device="cpu", precision="fp32")
    char_ids, _ = sentence_char_ids(SENTENCES[:2])
    with torch.no_grad():
        states = module.eval()(torch.from_numpy(char_ids))
    expected = states.layers()
    for row, (words, out) in enumerate(zip(SENTENCES[:2], encoder.encode(SENTENCES[:2]))):
        np.testing.assert_allclose(out, expected[:, row, 1 : len(words) + 1].numpy(), rtol=0, atol=1e-6)


def test_save_bilm_never_replaces_a_model_unless_asked(tmp_path, monkeypatch):
    from contextembed.encoders import save_bilm
    from contextembed.encoders._elmo import encoder as elmo_encoder

    torch.manual_seed(0)
    first, second = BiLMEncoderModule(elmo_options("tiny")), BiLMEncoderModule(elmo_options("tiny"))
    save_bilm(first, tmp_path / "model")
    saved = {path.name: path.read_bytes() for path in (tmp_path / "model").iterdir()}
    with pytest.raises(FileExistsError, match="overwrite=True"):
        save_bilm(second, tmp_path / "model")

    def interrupted(module, path, extra=None):
        raise KeyboardInterrupt

    monkeypatch.setattr(elmo_encoder, "save_weights", interrupted)
    with pytest.raises(KeyboardInterrupt):
        save_bilm(second, tmp_path / "model", overwrite=True)
    assert {path.name: path.read_bytes() for path in (tmp_path / "model").iterdir()} == saved
    assert sorted(path.name for path in tmp_path.iterdir()) == ["model"]  # no temporary left
    monkeypatch.undo()
    save_bilm(second, tmp_path / "model", overwrite=True)
    reloaded = load_encoder(tmp_path / "model", device="cpu", precision="fp32").module
    for (name, ours), theirs in zip(second.state_dict().items(), reloaded.state_dict().values()):
        torch.testing.assert_close(theirs, ours, rtol=0, atol=0, msg=name)


@pytest.mark.parametrize("extra, error, message", [
    ({"char_embed": np.zeros(3)}, ValueError,
     r"^extra\['char_embed'\] names a dataset the model writes itself \('char_embed'\): pick another name"),
    ({"CNN": np.zeros(3)}, ValueError, r"^extra\['CNN'\] names a group of the model's datasets \('CNN/W_cnn_0'\)"),
    ({"CNN/W_cnn_0/x": np.zeros(3)}, ValueError,
     r"^extra\['CNN/W_cnn_0/x'\] would be inside the model's dataset 'CNN/W_cnn_0'"),
    ({"softmax": np.zeros(3), "softmax/b": np.zeros(2)}, ValueError,
     r"^extra\['softmax/b'\] would be inside extra\['softmax'\]"),
    ({"vocab": np.array(["a", None], dtype=object)}, TypeError,
     r"^extra\['vocab'\] is an array of dtype object, which HDF5 cannot store: pass numbers"),
    ({"words": ["a", "b"]}, TypeError, r"^extra\['words'\] is an array of dtype <U1, which HDF5 cannot store"),
    ({"": np.zeros(1)}, ValueError, r"^extra\[''\]: a dataset name must be parts separated by '/'"),
    ({"/abs": np.zeros(1)}, ValueError, r"^extra\['/abs'\]: a dataset name must be parts separated by '/'"),
    ({"a//b": np.zeros(1)}, ValueError, r"^extra\['a//b'\]: a dataset name must be parts"),
    ({"a/../b": np.zeros(1)}, ValueError, r"^extra\['a/../b'\]: a dataset name must be parts"),
    ({3: np.zeros(1)}, TypeError, r"^extra's keys must be str dataset names, got int 3"),
    ([("softmax", np.zeros(1))], TypeError, r"^extra must be a mapping of dataset names to arrays \(or None\), got list"),
])
def test_save_bilm_checks_extra_before_writing_naming_it(tmp_path, extra, error, message):
    """A name the model writes, or an object array, failed inside h5py ("name already exists", "no
    native HDF5 equivalent") naming neither ``extra`` nor the key."""
    from contextembed.encoders import save_bilm

    torch.manual_seed(0)
    module = BiLMEncoderModule(elmo_options("tiny"))
    with pytest.raises(error, match=message):
        save_bilm(module, tmp_path / "model", extra=extra)
    assert list(tmp_path.iterdir()) == []  # nothing written


def test_save_bilm_writes_extra_datasets_beside_the_model(tmp_path):
    from contextembed.encoders import save_bilm

    torch.manual_seed(0)
    module = BiLMEncoderModule(elmo_options("tiny"))
    extra = {"softmax/W": np.ones((3, 2), dtype=np.float32), "softmax/b": np.arange(3), "flag": np.array(True)}
    save_bilm(module, tmp_path / "model", extra=extra)
    with h5py.File(tmp_path / "model" / "weights.hdf5", "r") as handle:
        for name, value in extra.items():
            np.testing.assert_array_equal(handle[name][...], value)
    load_encoder(tmp_path / "model", device="cpu", precision="fp32")  # extras are ignored


def test_module_trains(tmp_path):
    torch.manual_seed(0)
    module = BiLMEncoderModule(elmo_options("tiny"), dropout=0.1).train()
    char_ids, lengths = sentence_char_ids([["a", "b", "c"], ["d"]])
    states = module(torch.from_numpy(char_ids))
    assert states.mask.sum(1).tolist() == lengths.tolist()
    assert states.layers().shape == (3, 2, 5, module.output_width)
    loss = sum(x.pow(2).sum() for x in states.forward + states.backward)
    loss.backward()
    for name, param in module.named_parameters():
        assert param.grad is not None and torch.isfinite(param.grad).all(), name
    assert module.token_embedder.char_embedding.weight.grad[0].abs().sum() == 0  # padding id stays 0
    assert module.forward_layers[-1].input_linearity.weight.grad.abs().sum() > 0


# -- bad input ------------------------------------------------------------------------------------


def test_missing_weights_file(tmp_path):
    (tmp_path / "options.json").write_text(json.dumps(OPTIONS))
    with pytest.raises(ModelNotFoundError, match="weights.hdf5"):
        load_encoder(tmp_path)
    with pytest.raises(ModelNotFoundError, match=str(tmp_path / "weights.hdf5")):
        ElmoEncoder.load(tmp_path)


@pytest.mark.parametrize("key", ["lstm.cell_clip", "lstm.projection_dim", "char_cnn.filters",
                                 "char_cnn.embedding.dim", "char_cnn", "lstm.use_skip_connections"])
def test_options_missing_key(tmp_path, tf_weights, key):
    options = json.loads(json.dumps(OPTIONS))
    *parents, last = key.split(".")
    node = options
    for part in parents:
        node = node[part]
    del node[last]
    path = write_elmo_dir(tmp_path / "model", options, tf_weights)
    with pytest.raises(ElmoFormatError) as error:
        load_encoder(path)
    message = str(error.value)
    assert str(path / "options.json") in message and f"'{key}" in message


@pytest.mark.parametrize("section, key, value, expected", [
    ("lstm", "use_skip_connections", False, "use_skip_connections=false is not supported"),
    ("char_cnn", "activation", "sigmoid", "activation='sigmoid' is not supported"),
    ("char_cnn", "n_characters", 261, "n_characters=261 is not supported"),
    ("char_cnn", "max_characters_per_token", 60, "max_characters_per_token=60 is not supported"),
    ("char_cnn", "filters", [[1, 4], [2]], r"filters\[1\]"),
    ("lstm", "dim", "10", "'lstm.dim' must be int"),
    (None, "bidirectional", False, "bidirectional=False is not supported"),
])
def test_unsupported_options(tmp_path, tf_weights, section, key, value, expected):
    options = json.loads(json.dumps(OPTIONS))
    (options[section] if section else options)[key] = value
    path = write_elmo_dir(tmp_path / "model", options, tf_weights)
    with pytest.raises(ElmoFormatError, match=expected):
        load_encoder(path)


@pytest.mark.parametrize("key", ["cell_clip", "proj_clip"])
@pytest.mark.parametrize("value", [float("nan"), float("inf"), -float("inf"), -1.0])
def test_a_clip_that_is_not_a_finite_number_at_least_0_is_refused(tmp_path, tf_weights, key, value):
    """``cell_clip=NaN`` was accepted (the check was ``value < 0``) and every LSTM layer came back NaN."""
    with pytest.raises(ElmoFormatError, match=rf"options: lstm\.{key}={value!r} is out of range; expected a finite "
                                              r"number in \[0, .*\] \(0 or null: no clipping\)"):
        elmo_options("tiny", **{key: value})
    options = json.loads(json.dumps(OPTIONS))
    options["lstm"][key] = value
    with pytest.raises(ElmoFormatError, match=rf"lstm\.{key}={value!r} is out of range"):
        BiLMEncoderModule(options)
    path = write_elmo_dir(tmp_path / "model", options, tf_weights)  # a saved options.json (json writes NaN)
    reason = "holds (NaN|Infinity|-Infinity), which is not a JSON number" if value != -1.0 else "is out of range"
    with pytest.raises(ElmoFormatError, match=rf"{re.escape(str(path / 'options.json'))}: .*{reason}"):
        load_encoder(path)


@pytest.mark.parametrize("key, value", [("lstm.dim", 0), ("lstm.n_layers", -1), ("char_cnn.n_highway", -1),
                                        ("char_cnn.embedding.dim", 0)])
def test_sizes_out_of_range_are_refused(key, value):
    options = json.loads(json.dumps(OPTIONS))
    section, *rest = key.split(".")
    node = options[section]
    for part in rest[:-1]:
        node = node[part]
    node[rest[-1]] = value
    with pytest.raises(ElmoFormatError, match=rf"{re.escape(key)}={value} is out of range"):
        BiLMEncoderModule(options)


def test_invalid_json(tmp_path, tf_weights):
    path = write_elmo_dir(tmp_path / "model", OPTIONS, tf_weights)
    (path / "options.json").write_text("{not json")
    with pytest.raises(ElmoFormatError, match="not valid JSON"):
        load_encoder(path)


@pytest.mark.parametrize("dataset, bad_shape", [
    ("CNN/W_cnn_1", (1, 2, 5, CHAR_DIM)),  # filters and channels swapped
    ("RNN_1/RNN/MultiRNNCell/Cell1/LSTMCell/W_0", (4 * CELL, 2 * PROJ)),  # torch layout
    ("char_embed", (262, CHAR_DIM)),  # padding row already prepended
    ("CNN_high_1/b_carry", (1, 15)),
])
def test_dataset_with_wrong_shape(tmp_path, tf_weights, dataset, bad_shape):
    weights = {**tf_weights, dataset: np.zeros(bad_shape, dtype=np.float32)}
    path = write_elmo_dir(tmp_path / "model", OPTIONS, weights)
    expected = tf_weights[dataset].shape
    with pytest.raises(ElmoFormatError) as error:
        load_encoder(path)
    message = str(error.value)
    assert str(path / "weights.hdf5") in message and f"'{dataset}'" in message
    assert f"expected {expected}" in message and str(bad_shape) in message


def test_missing_dataset(tmp_path, tf_weights):
    weights = {k: v for k, v in tf_weights.items() if k != "RNN_0/RNN/MultiRNNCell/Cell1/LSTMCell/W_P_0"}
    path = write_elmo_dir(tmp_path / "model", OPTIONS, weights)
    with pytest.raises(ElmoFormatError, match=r"'RNN_0/RNN/MultiRNNCell/Cell1/LSTMCell/W_P_0' is missing \(expected shape \(10, 6\)\)"):
        load_encoder(path)


def test_missing_h5py(elmo_dir, monkeypatch):
    monkeypatch.setitem(sys.modules, "h5py", None)
    with pytest.raises(MissingDependencyError, match=r'pip install "\.\[elmo\]" from the contextembed repository'):
        load_encoder(elmo_dir)


def test_bad_encoder_options(elmo_dir, monkeypatch):
    from contextembed.encoders._elmo import encoder as elmo_encoder

    loaded = ElmoEncoder.load(elmo_dir, device="cpu", precision="fp32")
    monkeypatch.setattr(elmo_encoder, "load_bilm", lambda *args: pytest.fail("the weights were read before the options"))
    with pytest.raises(ValueError, match=r"^batch_words=0 is out of range; expected an integer in \[1, "):
        ElmoEncoder.load(elmo_dir, batch_words=0)
    for name in ("batch_words", "max_batch_size", "chunk_size"):  # True is not 1, 2.0 not 2
        for bad in (True, 2.0, float("nan")):
            with pytest.raises(TypeError, match=rf"^{name}={bad!r} is a \w+; expected an integer"):
                ElmoEncoder.load(elmo_dir, **{name: bad})
            with pytest.raises(TypeError, match=rf"^{name}={bad!r} is a \w+"):  # the constructor checks them too
                ElmoEncoder(loaded.module, **{name: bad})
        with pytest.raises(ValueError, match=rf"^{name}=-1 is out of range"):
            ElmoEncoder.load(elmo_dir, **{name: -1})
    with pytest.raises(ValueError, match="size='huge'"):
        elmo_options("huge")


def test_module_dedupe_gives_the_same_states():
    torch.manual_seed(0)
    module = BiLMEncoderModule(elmo_options("tiny")).eval()
    char_ids = torch.from_numpy(sentence_char_ids(SENTENCES)[0])
    with torch.no_grad():
        deduped, plain = module(char_ids), module(char_ids, dedupe=False)
    torch.testing.assert_close(deduped.layers(), plain.layers(), rtol=0, atol=1e-6)
    assert not deduped.layers()[:, 4, 2:].any()  # the empty sentence: zeros after its two markers


def test_subword_pooling_is_a_no_op_for_words(elmo):
    first = elmo.encode(SENTENCES[:2], subword_pooling="first")
    for pooling in ("last", "mean", "max"):
        for a, b in zip(first, elmo.encode(SENTENCES[:2], subword_pooling=pooling)):
            np.testing.assert_array_equal(a, b)
    doubled = elmo.encode(SENTENCES[:2], subword_pooling="first_last")[0]
    np.testing.assert_array_equal(doubled, np.concatenate([first[0], first[0]], axis=-1))


def test_bf16_precision_is_close_and_float32(elmo_dir, elmo):
    fast = ElmoEncoder.load(elmo_dir, device="cpu", precision="bf16")
    assert fast.dtype == torch.bfloat16
    out, exact = fast.encode(SENTENCES[:2]), elmo.encode(SENTENCES[:2])
    for a, b in zip(out, exact):
        assert a.dtype == np.float32 and a.shape == b.shape
        assert np.abs(a - b).max() < 0.2  # bf16 has ~3 significant digits; values are O(1)


def test_int8_precision_quantizes_the_character_cnn(elmo_dir, elmo, tmp_path):
    quantized = ElmoEncoder.load(elmo_dir, device="cpu", precision="int8")
    assert quantized.precision == "int8" and quantized.dtype == torch.float32
    assert {type(m).__name__ for m in quantized.module.token_embedder.modules()} >= {"Int8Linear"}
    assert not any(isinstance(m, torch.nn.Linear) for m in quantized.module.token_embedder.modules())
    out, exact = quantized.encode(SENTENCES[:2]), elmo.encode(SENTENCES[:2])
    for a, b in zip(out, exact):
        assert a.shape == b.shape and not np.array_equal(a, b)
        assert np.abs(a - b).max() < 0.2
    with pytest.raises(ValueError, match="precision='int8'.*cannot be saved"):
        quantized.save(tmp_path / "int8")


def test_auto_precision_follows_the_core_rule(elmo_dir):
    from contextembed._runtime.devices import resolve_precision

    encoder = ElmoEncoder.load(elmo_dir, device="cpu")
    assert encoder.precision == resolve_precision("auto", torch.device("cpu"))


def test_lstms_in_lockstep_equal_each_alone():
    from torch.nn.utils.rnn import pack_sequence

    from contextembed.encoders._elmo import ProjectedLSTM, run_lstms

    torch.manual_seed(0)
    pair = [ProjectedLSTM(3, 5, 4, cell_clip=0.5, proj_clip=0.5) for _ in range(2)]
    for layer in pair:
        layer.reset_parameters()
    packed = pack_sequence([torch.randn(6, 3), torch.randn(4, 3), torch.randn(1, 3)])
    sizes = packed.batch_sizes.tolist()
    other = torch.randn_like(packed.data)
    with torch.no_grad():
        together = run_lstms(pair, torch.stack([packed.data, other]), sizes)
        alone = [pair[0](packed.data, sizes), pair[1](other, sizes)]
    torch.testing.assert_close(together, torch.stack(alone), rtol=0, atol=1e-6)
    assert together.abs().max() <= 0.5 + 1e-7  # the projection clip holds
    with pytest.raises(ValueError, match="same cell_clip and proj_clip"):
        run_lstms([pair[0], ProjectedLSTM(3, 5, 4)], torch.stack([packed.data, other]), sizes)


def test_the_constructor_runs_the_precision_it_is_given_and_never_measures(elmo_dir, monkeypatch):
    """Issue 54: ``precision="auto"`` is chosen (the machine's record, measured once where none
    answers) by ``load`` and ``from_options``, never by the constructor."""
    import copy

    from contextembed._runtime import devices

    loaded = ElmoEncoder.load(elmo_dir, device="cpu", precision="fp32")
    with pytest.raises(ValueError, match="runs the precision it is given, got 'auto'"):
        ElmoEncoder(copy.deepcopy(loaded.module), device="cpu", precision="auto")
    monkeypatch.setattr(devices, "auto_cpu_precision", lambda *args, **kwargs: pytest.fail("measured"))
    assert ElmoEncoder(copy.deepcopy(loaded.module), device="cpu").precision == "fp32"
    assert ElmoEncoder.load(elmo_dir, device="cpu", precision="bf16").precision == "bf16"
    chosen = []
    monkeypatch.setattr(devices, "auto_cpu_precision", lambda *args, **kwargs: chosen.append(1) or "bf16")
    assert ElmoEncoder.load(elmo_dir, device="cpu").precision == "bf16"  # "auto", chosen once
    assert ElmoEncoder.from_options(loaded.options, device="cpu").precision == "bf16"
    assert len(chosen) == 2
    with pytest.raises(ValueError, match="precision"):
        ElmoEncoder.from_options(loaded.options, precision="fp64")  # checked before the module is built
