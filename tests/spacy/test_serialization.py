"""``nlp.to_disk`` -> ``spacy.load``: identical tensors and entities; the encoder by name or embedded."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
import spacy

from spacy_helpers import encoder_config, ner_config, ner_examples

TEXTS = ["Peter Blackburn met EU officials in Brussels", "New York Times reported behaviour in Washington", ""]


def trained_pipeline(model_dir, **component_options):
    """A contextembed + NER pipeline trained until it finds entities in ``TEXTS[0]`` (something to
    compare). 30 updates found none in about one session in ten while the tiny BERT's vocabulary
    was trained anew in each session (now a fixture file); the loop keeps the test from resting on
    how far a fixed number of updates gets."""
    spacy.util.fix_random_seed(0)
    nlp = spacy.blank("en")
    nlp.add_pipe("contextembed", config={**encoder_config(model_dir), **component_options})
    nlp.add_pipe("ner", config=ner_config(layers="all"))
    optimizer = nlp.initialize(lambda: ner_examples(nlp))
    optimizer.learn_rate = 0.01
    for update in range(200):
        nlp.update(ner_examples(nlp), sgd=optimizer)
        if update >= 29 and any(nlp(TEXTS[0]).ents):
            break
    return nlp


def assert_same_output(nlp, loaded):
    for a, b in zip(nlp.pipe(TEXTS), loaded.pipe(TEXTS)):
        np.testing.assert_array_equal(a.tensor, b.tensor)
        assert [(e.start, e.end, e.label_) for e in a.ents] == [(e.start, e.end, e.label_) for e in b.ents]
    [listener] = [n for n in nlp.get_pipe("ner").model.walk() if n.name == "contextembed_listener"]
    [loaded_listener] = [n for n in loaded.get_pipe("ner").model.walk() if n.name == "contextembed_listener"]
    np.testing.assert_array_equal(listener.layers[0].get_param("weights"), loaded_listener.layers[0].get_param("weights"))


def test_roundtrip_refers_to_the_encoder_by_path(tiny_bert_dir, tmp_path):
    nlp = trained_pipeline(tiny_bert_dir)
    assert any(nlp(TEXTS[0]).ents)  # something to compare
    nlp.to_disk(tmp_path / "pipeline")
    assert not (tmp_path / "pipeline" / "contextembed" / "encoder").exists()
    assert nlp.config["components"]["contextembed"]["encoder"]["name"] == str(tiny_bert_dir)
    loaded = spacy.load(tmp_path / "pipeline")
    assert_same_output(nlp, loaded)


def test_roundtrip_with_embedded_weights(tiny_bert_dir, tmp_path):
    model_dir = tmp_path / "model"
    shutil.copytree(tiny_bert_dir, model_dir)
    nlp = trained_pipeline(model_dir, embed_weights=True)
    nlp.to_disk(tmp_path / "pipeline")
    shutil.rmtree(model_dir)  # the original is gone: the pipeline must use its own copy
    loaded = spacy.load(tmp_path / "pipeline")
    assert_same_output(nlp, loaded)
    assert str(tmp_path / "pipeline") in loaded.get_pipe("contextembed").encoder.spec


def test_embedded_static_vectors(tmp_path):
    from contextembed.encoders import write_word2vec

    rng = np.random.default_rng(0)
    words = ["peter", "met", "eu", "officials", "in", "brussels"]
    write_word2vec(tmp_path / "vectors.txt", words, rng.normal(size=(6, 8)).astype("f"))
    nlp = spacy.blank("en")
    nlp.add_pipe("contextembed", config={**encoder_config(tmp_path / "vectors.txt"), "embed_weights": True})
    before = nlp(TEXTS[0]).tensor
    nlp.to_disk(tmp_path / "pipeline")
    nlp.to_disk(tmp_path / "pipeline")  # saved again to the same place, as spacy train does each epoch
    (tmp_path / "vectors.txt").unlink()
    np.testing.assert_array_equal(spacy.load(tmp_path / "pipeline")(TEXTS[0]).tensor, before)


def test_embedded_elmo(tiny_elmo_dir, tmp_path):
    source = tmp_path / "elmo"
    shutil.copytree(tiny_elmo_dir, source)
    nlp = spacy.blank("en")
    nlp.add_pipe("contextembed", config={**encoder_config(source), "embed_weights": True})
    before = nlp(TEXTS[0]).tensor
    nlp.to_disk(tmp_path / "pipeline")
    shutil.rmtree(source)
    np.testing.assert_array_equal(spacy.load(tmp_path / "pipeline")(TEXTS[0]).tensor, before)


def test_to_bytes_roundtrip(tiny_bert_dir):
    nlp = trained_pipeline(tiny_bert_dir)
    loaded = spacy.blank("en")
    loaded.add_pipe("contextembed", config=encoder_config(tiny_bert_dir))
    loaded.add_pipe("ner", config=ner_config(layers="all"))
    loaded.from_bytes(nlp.to_bytes())
    assert_same_output(nlp, loaded)


@pytest.mark.slow
def test_a_pickled_pipeline_keeps_its_mix_and_loads_the_same_encoder_again(tiny_bert_dir):
    """The loaded transformer does not pickle (its forward hooks are local functions); the copy
    leaves it out and loads the same model when first used. nlp.pipe(n_process=...) pickles the
    pipeline where processes are spawned (macOS, Windows)."""
    import pickle

    nlp = trained_pipeline(tiny_bert_dir, cache_mb=1)
    copy = pickle.loads(pickle.dumps(nlp))
    assert not copy.get_pipe("contextembed").model.loader.loaded
    assert_same_output(nlp, copy)
    assert copy.get_pipe("contextembed").encoder.spec == nlp.get_pipe("contextembed").encoder.spec


def test_pickled_doc_keeps_vectors(make_nlp):
    import pickle

    doc = make_nlp()(TEXTS[0])
    restored = pickle.loads(pickle.dumps(doc))
    np.testing.assert_array_equal(restored.vector, doc.vector)
    assert restored[0].similarity(restored[1]) == pytest.approx(doc[0].similarity(doc[1]))


@pytest.mark.slow
@pytest.mark.pretrained
def test_named_model_is_saved_by_name(minilm, tmp_path):
    nlp = spacy.blank("en")
    nlp.add_pipe("contextembed", config={"encoder": {"name": "minilm-l6", "device": "cpu", "precision": "fp32"}})
    before = nlp(TEXTS[0]).tensor
    nlp.to_disk(tmp_path / "pipeline")
    saved = spacy.util.load_config(tmp_path / "pipeline" / "config.cfg")
    assert saved["components"]["contextembed"]["encoder"]["name"] == "minilm-l6"
    assert sum(f.stat().st_size for f in (tmp_path / "pipeline").rglob("*") if f.is_file()) < 200_000
    np.testing.assert_array_equal(spacy.load(tmp_path / "pipeline")(TEXTS[0]).tensor, before)


# -- embedded weights are checked against the cfg's provenance record before anything loads ------


def _static_pipeline(tmp_path, name: str, seed: int, **options):
    """A pipeline over small static vectors, saved to ``tmp_path / name``; returns it."""
    from contextembed.encoders import write_word2vec

    source = tmp_path / f"{name}.txt"
    words = ["Peter", "Blackburn", "met", "EU", "officials", "in", "Brussels"]
    write_word2vec(source, words, np.random.default_rng(seed).normal(size=(len(words), 8)).astype("f"))
    nlp = spacy.blank("en")
    nlp.add_pipe("contextembed", config={**encoder_config(source), **options})
    nlp.to_disk(tmp_path / name)
    return nlp


def _component_cfg(pipeline):
    import json

    return json.loads((pipeline / "contextembed" / "cfg").read_text())


def _drop_record(pipeline):
    """The cfg as contextembed wrote it before provenance records."""
    import json

    cfg = _component_cfg(pipeline)
    cfg.pop("provenance", None)
    (pipeline / "contextembed" / "cfg").write_text(json.dumps(cfg))


def test_the_cfg_records_what_was_saved(tmp_path):
    from contextembed._runtime.provenance import tree_hash

    _static_pipeline(tmp_path, "embedded", 0, embed_weights=True, subword_pooling="mean")
    _static_pipeline(tmp_path, "by_name", 0)
    embedded, by_name = _component_cfg(tmp_path / "embedded"), _component_cfg(tmp_path / "by_name")
    record = embedded["provenance"]
    assert record["artifact"] == "spacy encoder component" and record["embedded"] is True
    assert record["embedded_fingerprint"] == tree_hash(tmp_path / "embedded" / "contextembed" / "encoder")
    assert record["model"] == embedded["encoder_identity"]["fingerprint"]
    assert record["subword_pooling"] == "mean" and record["tensor_layers"] == -1 and record["window"] is None
    assert by_name["provenance"]["embedded"] is False and by_name["provenance"]["embedded_fingerprint"] is None


@pytest.mark.parametrize("damage", ["flip", "truncate", "extra file"])
def test_changed_embedded_files_are_refused_before_loading(tmp_path, damage):
    from contextembed.errors import ProvenanceError

    _static_pipeline(tmp_path, "pipeline", 0, embed_weights=True)
    model = tmp_path / "pipeline" / "contextembed" / "encoder" / "model"
    weights = model / "vectors.safetensors"
    raw = bytearray(weights.read_bytes())
    if damage == "flip":
        raw[-1] ^= 0xFF  # same size, other content
    elif damage == "truncate":
        raw = raw[: len(raw) // 2]
    else:
        (model / ".hidden_extra").write_text("x")
    weights.write_bytes(bytes(raw))
    with pytest.raises(ProvenanceError, match="embedded_fingerprint") as raised:
        spacy.load(tmp_path / "pipeline")  # refused here, not at the first doc
    assert raised.value.field == "embedded_fingerprint"
    assert str(tmp_path / "pipeline" / "contextembed" / "encoder") in str(raised.value)
    assert "save the pipeline again" in str(raised.value)


def test_an_encoder_directory_swapped_in_from_another_save_is_refused(tmp_path):
    from contextembed.errors import ProvenanceError

    _static_pipeline(tmp_path, "pipeline", 0, embed_weights=True)
    _static_pipeline(tmp_path, "other", 1, embed_weights=True)
    encoder = tmp_path / "pipeline" / "contextembed" / "encoder"
    shutil.rmtree(encoder)
    shutil.copytree(tmp_path / "other" / "contextembed" / "encoder", encoder)
    with pytest.raises(ProvenanceError, match="swapped") as raised:
        spacy.load(tmp_path / "pipeline")
    assert raised.value.field == "embedded_fingerprint"


def test_a_missing_embedded_encoder_is_refused_even_if_the_original_model_is_there(tmp_path):
    from contextembed.errors import ProvenanceError

    _static_pipeline(tmp_path, "pipeline", 0, embed_weights=True)
    shutil.rmtree(tmp_path / "pipeline" / "contextembed" / "encoder")
    with pytest.raises(ProvenanceError, match="records an embedded encoder") as raised:
        spacy.load(tmp_path / "pipeline")
    assert raised.value.field == "embedded"


def test_an_encoder_directory_the_cfg_does_not_expect_is_refused(tmp_path):
    from contextembed.errors import ProvenanceError

    _static_pipeline(tmp_path, "pipeline", 0)
    _static_pipeline(tmp_path, "other", 1, embed_weights=True)
    shutil.copytree(tmp_path / "other" / "contextembed" / "encoder", tmp_path / "pipeline" / "contextembed" / "encoder")
    with pytest.raises(ProvenanceError, match="not part of this save") as raised:
        spacy.load(tmp_path / "pipeline")
    assert raised.value.field == "embedded"


def test_an_edited_record_is_refused(tmp_path):
    import json

    from contextembed.errors import ProvenanceError

    _static_pipeline(tmp_path, "pipeline", 0, embed_weights=True)
    cfg = _component_cfg(tmp_path / "pipeline")
    cfg["tensor_combine"] = "sum"  # the cfg no longer says what the record says
    (tmp_path / "pipeline" / "contextembed" / "cfg").write_text(json.dumps(cfg))
    with pytest.raises(ProvenanceError, match="tensor_combine") as raised:
        spacy.load(tmp_path / "pipeline")
    assert raised.value.field == "tensor_combine"


def test_from_disk_excluding_the_encoder_loads_the_original_model(tmp_path):
    nlp = _static_pipeline(tmp_path, "pipeline", 0, embed_weights=True)
    shutil.rmtree(tmp_path / "pipeline" / "contextembed" / "encoder" / "model")  # not even read
    loaded = spacy.blank("en")
    loaded.add_pipe("contextembed", config={**encoder_config(tmp_path / "pipeline.txt"), "embed_weights": True})
    loaded.get_pipe("contextembed").from_disk(tmp_path / "pipeline" / "contextembed", exclude=["encoder"])
    np.testing.assert_array_equal(loaded(TEXTS[0]).tensor, nlp(TEXTS[0]).tensor)


def test_a_pipeline_saved_before_records_loads_when_unambiguous(tmp_path):
    nlp = _static_pipeline(tmp_path, "by_name", 0)
    embedded = _static_pipeline(tmp_path, "embedded", 1, embed_weights=True)
    (tmp_path / "embedded.txt").unlink()
    _drop_record(tmp_path / "by_name"), _drop_record(tmp_path / "embedded")
    np.testing.assert_array_equal(spacy.load(tmp_path / "by_name")(TEXTS[0]).tensor, nlp(TEXTS[0]).tensor)
    np.testing.assert_array_equal(spacy.load(tmp_path / "embedded")(TEXTS[0]).tensor, embedded(TEXTS[0]).tensor)


def test_a_pipeline_saved_before_records_with_a_stale_encoder_directory_is_refused(tmp_path):
    from contextembed.errors import ProvenanceError

    _static_pipeline(tmp_path, "pipeline", 0)
    _static_pipeline(tmp_path, "other", 1, embed_weights=True)
    shutil.copytree(tmp_path / "other" / "contextembed" / "encoder", tmp_path / "pipeline" / "contextembed" / "encoder")
    _drop_record(tmp_path / "pipeline")
    with pytest.raises(ProvenanceError, match="save the pipeline again") as raised:
        spacy.load(tmp_path / "pipeline")
    assert raised.value.field == "embed_weights"


def test_a_damaged_embedded_copy_of_a_pipeline_saved_before_records_is_refused(tmp_path):
    from contextembed.errors import ModelFormatError

    _static_pipeline(tmp_path, "pipeline", 0, embed_weights=True)
    _drop_record(tmp_path / "pipeline")
    weights = tmp_path / "pipeline" / "contextembed" / "encoder" / "model" / "vectors.safetensors"
    weights.write_bytes(weights.read_bytes()[:-8])
    with pytest.raises(ModelFormatError, match="fingerprint"):
        spacy.load(tmp_path / "pipeline")


@pytest.mark.slow
def test_the_backend_is_saved_in_the_config_and_may_change_when_loading(tiny_bert_dir, tmp_path):
    """As ``device`` and ``precision``: the encoder is frozen, so a pipeline saved on one backend
    loads on another and its features are computed again there (within the engine's fp32 bar)."""
    pytest.importorskip("openvino")
    nlp = spacy.blank("en")
    nlp.add_pipe("contextembed", config=encoder_config(tiny_bert_dir, backend="openvino"))
    saved = nlp(TEXTS[0]).tensor
    assert nlp.get_pipe("contextembed").encoder.backend == "openvino"
    nlp.to_disk(tmp_path / "pipeline")
    config = spacy.util.load_config(tmp_path / "pipeline" / "config.cfg")
    assert config["components"]["contextembed"]["encoder"]["backend"] == "openvino"
    loaded = spacy.load(tmp_path / "pipeline")
    np.testing.assert_array_equal(loaded(TEXTS[0]).tensor, saved)
    on_torch = spacy.load(tmp_path / "pipeline", config={"components": {"contextembed": {"encoder": {"backend": "torch"}}}})
    assert on_torch.get_pipe("contextembed").encoder.backend == "torch"
    np.testing.assert_allclose(on_torch(TEXTS[0]).tensor, saved, atol=1e-4)


def test_a_pipeline_configured_with_encoder_v1_runs_torch(tiny_bert_dir):
    nlp = spacy.blank("en")
    nlp.add_pipe("contextembed", config={"encoder": {"@misc": "contextembed.Encoder.v1", "name": str(tiny_bert_dir),
                                                     "device": "cpu", "precision": "fp32"}})
    assert nlp.get_pipe("contextembed").encoder.backend == "torch"
    assert nlp(TEXTS[0]).tensor.shape[0] == len(TEXTS[0].split())


# -- what the component's own cfg may and may not decide ---------------------------------------


@pytest.mark.slow
def test_overrides_of_store_layers_and_embed_weights_take_effect_when_loading(tmp_path):
    """They used to be replaced, silently, by the values saved in the component's cfg: the loaded
    pipeline stored no layers and saved no weights while its config said it would."""
    from spacy.tokens import Doc

    _static_pipeline(tmp_path, "pipeline", 0)
    overrides = {"components": {"contextembed": {"store_layers": True, "embed_weights": True}}}
    loaded = spacy.load(tmp_path / "pipeline", config=overrides)
    assert loaded.get_pipe("contextembed").cfg["store_layers"] is True
    assert loaded(TEXTS[0])._.get("contextembed")["contextembed"].shape == (1, 7, 8)
    loaded.to_disk(tmp_path / "embedded")
    (tmp_path / "pipeline.txt").unlink()
    assert Doc.has_extension("contextembed")
    assert spacy.load(tmp_path / "embedded")(TEXTS[0]).tensor.shape == (7, 8)


@pytest.mark.parametrize("override", [{"tensor_layers": 0}, {"tensor_combine": "sum"}])
def test_overrides_of_what_shapes_doc_tensor_are_refused_when_loading(tmp_path, override):
    """They used to be ignored: the saved cfg's value was used, whatever config.cfg said."""
    from contextembed.errors import ProvenanceError

    _static_pipeline(tmp_path, "pipeline", 0)
    with pytest.raises(ProvenanceError, match=next(iter(override))) as raised:
        spacy.load(tmp_path / "pipeline", config={"components": {"contextembed": override}})
    assert raised.value.field == next(iter(override))


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"", "cannot be read as the component's saved settings"),
        (b"{not json", "cannot be read as the component's saved settings"),
        (b"\xff\xfe{}", "cannot be read as the component's saved settings.*UTF-8"),
        (b"[1, 2]", "holds list"),
        (b"[" * 1500 + b"]" * 1500, r"cannot be read as the component's saved settings \(nested 1500 levels deep"),
        (b'{"a": NaN}', "cannot be read as the component's saved settings.*holds NaN"),
    ],
    ids=["empty", "not-json", "not-utf8", "list", "deep", "nan"],
)
def test_a_damaged_cfg_is_an_error_naming_the_file(tmp_path, content, message):
    from contextembed.errors import FileFormatError

    _static_pipeline(tmp_path, "pipeline", 0)
    cfg = tmp_path / "pipeline" / "contextembed" / "cfg"
    cfg.write_bytes(content)
    with pytest.raises(FileFormatError, match=message) as raised:
        spacy.load(tmp_path / "pipeline")
    assert raised.value.path == str(cfg)


@pytest.mark.parametrize("identity", ["x", [1], {}, {"spec": "pipeline.txt"}])
@pytest.mark.parametrize("record", [True, False])
def test_a_damaged_encoder_identity_is_an_error_naming_the_file(tmp_path, identity, record):
    """It used to be an AttributeError or KeyError naming nothing (a record catches most of it first)."""
    import json

    from contextembed.errors import FileFormatError, ProvenanceError

    _static_pipeline(tmp_path, "pipeline", 0)
    if not record:
        _drop_record(tmp_path / "pipeline")
    cfg = _component_cfg(tmp_path / "pipeline")
    cfg["encoder_identity"] = identity
    if isinstance(identity, dict) and record:
        identity["fingerprint"] = cfg["provenance"]["model"]  # the record's check passes
    (tmp_path / "pipeline" / "contextembed" / "cfg").write_text(json.dumps(cfg))
    with pytest.raises((FileFormatError, ProvenanceError), match="encoder_identity|model=") as raised:
        spacy.load(tmp_path / "pipeline")
    if isinstance(raised.value, FileFormatError):
        assert raised.value.path == str(tmp_path / "pipeline" / "contextembed" / "cfg")


@pytest.mark.parametrize("data", [b"not msgpack", b"", "msgpack list", "no cfg"])
def test_damaged_bytes_are_an_error_naming_the_component(tmp_path, data):
    import srsly

    from contextembed.errors import FileFormatError

    data = {"msgpack list": srsly.msgpack_dumps([1]), "no cfg": srsly.msgpack_dumps({"x": 1})}.get(data, data)
    component = _static_pipeline(tmp_path, "pipeline", 0).get_pipe("contextembed")
    with pytest.raises(FileFormatError, match="the serialized 'contextembed' component"):
        component.from_bytes(data)


def test_a_saved_pipeline_runs_the_precision_it_was_trained_with(tiny_bert_dir, tmp_path, monkeypatch):
    """Issue 53 item 5: precision='auto' chose bf16 where the pipeline was trained; loaded where auto
    would choose fp32 (another machine, tuning records refreshed), it runs bf16 again."""
    from contextembed._runtime import devices as _devices

    monkeypatch.setenv(_devices.AUTO_CPU_PRECISION_ENV, "bf16")
    nlp = spacy.blank("en")
    config = encoder_config(tiny_bert_dir)
    config["encoder"] = {**config["encoder"], "precision": "auto"}
    nlp.add_pipe("contextembed", config=config)
    before = nlp(TEXTS[0]).tensor
    assert nlp.get_pipe("contextembed").encoder.precision == "bf16"
    nlp.to_disk(tmp_path / "pipeline")
    monkeypatch.setenv(_devices.AUTO_CPU_PRECISION_ENV, "fp32")
    loaded = spacy.load(tmp_path / "pipeline")
    np.testing.assert_array_equal(loaded(TEXTS[0]).tensor, before)
    assert loaded.get_pipe("contextembed").encoder.precision == "bf16"
    other = spacy.blank("en")
    other.add_pipe("contextembed", config=config).from_bytes(nlp.get_pipe("contextembed").to_bytes())
    assert other.get_pipe("contextembed").encoder.precision == "bf16"
