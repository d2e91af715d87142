"""Every path that can run on a GPU, checked against the same path on the CPU.

Encoders of each family and precision, the scikit-learn adapters and taggers, the spaCy component
and listener after ``spacy.require_gpu()``, the three pretraining objectives and ``distill``. They
skip without CUDA. ``CONTEXTEMBED_TEST_DEVICE=cpu`` runs them with the CPU standing in for the GPU:
a dry run of the tests' own logic on a machine without one (the comparisons then hold exactly).
"""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch

from contextembed import distill, load_encoder
from contextembed.sklearn import (BiLSTMCRFTagger, SequenceTagger, TextEmbedder, TextPairEmbedder, TokenEmbedder,
                                  clear_cache, clear_encoders)

pytestmark = pytest.mark.gpu

SENTENCES = [
    ["the", "quick", "brown", "fox"],
    [],
    ["New", "York"] * 40,  # longer than the tiny models' 40 positions: windows
    ["ça", "coûte", "3,5", "€", "—", "naïve", "café", "東京"],
    ["Peter", "Blackburn", "met", "EU", "officials", "in", "Brussels"],
]
TAGS = [["O"] * 4, [], ["B-LOC", "I-LOC"] * 40, ["O"] * 8, ["B-PER", "I-PER", "O", "B-ORG", "O", "O", "B-LOC"]]
#: fp32 on a GPU against fp32 on the CPU: other kernels and summation orders, no TF32
FP32_TOLERANCE = 1e-4


@pytest.fixture(scope="module")
def gpu() -> str:
    name = os.environ.get("CONTEXTEMBED_TEST_DEVICE")
    if name:
        return name
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    return "cuda"


@pytest.fixture(autouse=True)
def fresh_adapters():
    clear_cache()
    clear_encoders()
    yield
    clear_cache()
    clear_encoders()


def _cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a, b = a.reshape(-1, a.shape[-1]), b.reshape(-1, b.shape[-1])
    return (a * b).sum(1) / np.maximum(np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1), 1e-12)


def _assert_close(cpu_rows, gpu_rows, tolerance=FP32_TOLERANCE):
    assert len(cpu_rows) == len(gpu_rows)
    for a, b in zip(cpu_rows, gpu_rows):
        a, b = np.asarray(a), np.asarray(b)
        assert a.shape == b.shape and b.dtype == np.float32
        assert np.abs(a - b).max(initial=0) < tolerance


@pytest.mark.parametrize("model", ["tiny_bert_dir", "tiny_roberta_dir"])
def test_transformer_fp32_matches_the_cpu(request, gpu, model):
    path = str(request.getfixturevalue(model))
    cpu = load_encoder(path, device="cpu", precision="fp32")
    on_gpu = load_encoder(path, device=gpu, precision="fp32")
    assert on_gpu.device.type == torch.device(gpu).type
    _assert_close(cpu.encode(SENTENCES), on_gpu.encode(SENTENCES))
    # many sentences of every length in one call: the GPU's token budget batches them, in input order
    many = [SENTENCES[i % len(SENTENCES)][: 1 + i % 60] for i in range(300)]
    _assert_close(cpu.encode(many), on_gpu.encode(many))


@pytest.mark.parametrize("precision", ["fp16", "bf16", "auto"])
def test_reduced_precisions_track_fp32(tiny_bert_dir, gpu, precision):
    exact = load_encoder(str(tiny_bert_dir), device="cpu", precision="fp32").encode(SENTENCES)
    encoder = load_encoder(str(tiny_bert_dir), device=gpu, precision=precision)
    if precision == "auto" and gpu.startswith("cuda"):
        assert encoder.precision == ("bf16" if torch.cuda.is_bf16_supported() else "fp16")
    for a, b in zip(exact, encoder.encode(SENTENCES)):
        assert a.shape == b.shape and b.dtype == np.float32 and np.isfinite(b).all()
        if a.size:
            assert _cosines(a, b).min() > 0.99


@pytest.mark.parametrize("subword_pooling", ["first", "first_last", "mean", "max"])
def test_words_pooled_on_the_gpu_match_the_cpu(tiny_bert_dir, gpu, subword_pooling):
    """Layers combined and pieces pooled where the model ran (FeatureExtractor's word path), the
    rows copied back through pinned buffers; windows, document context and float16 rows included."""
    from contextembed._inputs.documents import in_context
    from contextembed.extraction import FeatureExtractor

    many = [SENTENCES[i % len(SENTENCES)][: 1 + i % 60] for i in range(300)]
    doc_ids = [i // 7 for i in range(len(many))]
    rows = {}
    for device in ("cpu", gpu):
        encoder = load_encoder(str(tiny_bert_dir), device=device, precision="fp32")
        for combine in ("concat", "scalar_mix"):
            extractor = FeatureExtractor(encoder, layers="all", combine=combine, subword_pooling=subword_pooling)
            rows[device, combine] = extractor.words(many)
        context = FeatureExtractor(encoder, layers=[-2, -1], subword_pooling=subword_pooling, context=8)
        rows[device, "context"] = list(context.iter_words(many, doc_ids=doc_ids))
        rows[device, "alone"] = FeatureExtractor(encoder, layers=[-2, -1], subword_pooling=subword_pooling).words(many)
        rows[device, "float16"] = list(encoder.iter_encode_pooled(many, context.pooling, subword_pooling, dtype="float16"))
    for kind in ("concat", "scalar_mix", "context"):
        _assert_close(rows["cpu", kind], rows[gpu, kind])
    for a, b in zip(rows["cpu", "float16"], rows[gpu, "float16"]):
        assert b.dtype == np.float16 and np.abs(a.astype(np.float32) - b.astype(np.float32)).max(initial=0) < 1e-2
    assert np.abs(rows[gpu, "context"][0] - rows[gpu, "alone"][0]).max() > 1e-3  # the context was seen


def test_elmo_matches_the_cpu(tiny_elmo_dir, gpu):
    cpu = load_encoder(str(tiny_elmo_dir), device="cpu", precision="fp32")
    on_gpu = load_encoder(str(tiny_elmo_dir), device=gpu, precision="fp32")
    _assert_close(cpu.encode(SENTENCES), on_gpu.encode(SENTENCES))


def test_sklearn_embedders_match_the_cpu(tiny_bert_dir, gpu):
    bert = str(tiny_bert_dir)
    texts = [" ".join(s) for s in SENTENCES if s]
    pairs = [(texts[0], texts[1]), (texts[2], texts[3])]
    long_text = " ".join(["unaffable"] * 30)  # longer than the tiny model: its pieces come back to the host
    texts_and_long = texts + [long_text]
    pairs_and_long = pairs + [(long_text, texts[0])]
    # the text poolings and pair sides pooled on the GPU (every text of a batch at once), the default piece mean
    for make, X in ((lambda **o: TokenEmbedder(bert, layers=[-2, -1], combine="concat", **o), SENTENCES),
                    (lambda **o: TextEmbedder(bert, **o), texts),
                    (lambda **o: TextEmbedder(bert, text_pooling="mean", subword_pooling="first", **o), texts_and_long),
                    (lambda **o: TextEmbedder(bert, text_pooling="max", subword_pooling="mean", **o), texts_and_long),
                    (lambda **o: TextEmbedder(bert, text_pooling="cls", **o), texts_and_long),
                    (lambda **o: TextPairEmbedder(bert, **o), pairs),
                    (lambda **o: TextPairEmbedder(bert, subword_pooling="max", text_pooling="max", **o), pairs_and_long),
                    (lambda **o: TextPairEmbedder(bert, pair_features="cls", **o), pairs_and_long)):
        cpu = make(device="cpu", precision="fp32").fit(X).transform(X)
        on_gpu = make(device=gpu, precision="fp32").fit(X).transform(X)
        if isinstance(cpu, np.ndarray):
            cpu, on_gpu = [cpu], [on_gpu]
        _assert_close(cpu, on_gpu)


def test_document_context_matches_the_cpu(tiny_bert_dir, gpu):
    # neighbours' pieces around each sentence, two documents, a sentence longer than the model (windows)
    doc_ids = ["a", "a", "a", "b", "b"]
    outputs = []
    for device in ("cpu", gpu):
        embedder = TokenEmbedder(str(tiny_bert_dir), layers="all", combine="mean", context=8, device=device,
                                 precision="fp32")
        outputs.append(embedder.fit(SENTENCES, doc_ids=doc_ids).transform(SENTENCES, doc_ids=doc_ids))
    _assert_close(*outputs)
    alone = TokenEmbedder(str(tiny_bert_dir), layers="all", combine="mean", device=gpu, precision="fp32")
    alone = alone.fit(SENTENCES).transform(SENTENCES)
    assert np.abs(np.asarray(alone[0]) - np.asarray(outputs[1][0])).max() > 1e-3  # the context was seen


def test_taggers_train_on_the_gpu(tiny_bert_dir, gpu):
    embedder = TokenEmbedder(str(tiny_bert_dir), layers="all", combine="scalar_mix", device=gpu, precision="fp32")
    tagger = BiLSTMCRFTagger(embedder, device=gpu, hidden_size=32, max_epochs=60, patience=60, learning_rate=1e-2,
                             dropout=0.1, word_dropout=0.0, validation_fraction=0.0, random_state=0)
    tagger.fit(SENTENCES, TAGS)
    assert tagger.device_.startswith(torch.device(gpu).type)
    assert tagger.score(SENTENCES, TAGS) == 1.0
    assert [len(p) for p in tagger.predict(SENTENCES)] == [len(s) for s in SENTENCES]
    linear = SequenceTagger(TokenEmbedder(str(tiny_bert_dir), layers=[-2, -1], combine="concat", device=gpu,
                                          precision="fp32")).fit(SENTENCES, TAGS)
    cpu = SequenceTagger(TokenEmbedder(str(tiny_bert_dir), layers=[-2, -1], combine="concat", device="cpu",
                                       precision="fp32")).fit(SENTENCES, TAGS)
    assert linear.predict(SENTENCES) == cpu.predict(SENTENCES)


def test_spacy_listener_trains_after_require_gpu(tiny_bert_dir, gpu, tmp_path):
    spacy = pytest.importorskip("spacy")
    import contextembed.spacy  # noqa: F401  (registers the factory and architectures)
    from spacy.training import Example

    train = [("Peter Blackburn met EU officials in Brussels", [(0, 15, "PER"), (20, 22, "ORG"), (36, 44, "LOC")]),
             ("New York Times reported behaviour in Washington", [(0, 14, "ORG"), (37, 47, "LOC")])]
    listener = {"@architectures": "contextembed.Listener.v1", "layers": "all", "combine": "scalar_mix"}
    ner = {"model": {"@architectures": "spacy.TransitionBasedParser.v2", "state_type": "ner",
                     "extra_state_tokens": False, "hidden_width": 16, "maxout_pieces": 2, "use_upper": True,
                     "nO": None, "tok2vec": listener}}
    on_gpu = gpu.startswith("cuda")
    if on_gpu:
        spacy.require_gpu()
    try:
        nlp = spacy.blank("en")
        nlp.add_pipe("contextembed", config={"encoder": {"name": str(tiny_bert_dir), "device": gpu, "precision": "fp32"}})
        nlp.add_pipe("ner", config=ner)

        def examples():
            return [Example.from_dict(nlp.make_doc(text), {"entities": spans}) for text, spans in train]

        optimizer = nlp.initialize(examples)
        assert nlp.get_pipe("contextembed").encoder.device.type == torch.device(gpu).type
        losses = {}
        for _ in range(5):
            nlp.update(examples(), sgd=optimizer, losses=losses)
        assert np.isfinite(losses["ner"])
        [mix_listener] = nlp.get_pipe("contextembed").listeners
        weights = mix_listener.layers[0].get_param("weights")
        assert np.all(np.asarray(weights.get() if hasattr(weights, "get") else weights) != 0)
        doc = nlp(train[0][0])
        assert isinstance(doc.tensor, np.ndarray) and doc.tensor.shape[0] == len(doc)
        nlp.to_disk(tmp_path / "pipeline")
    finally:
        if on_gpu:
            spacy.require_cpu()
    # the saved pipeline loads back on the CPU and tags as the GPU pipeline did
    loaded = spacy.load(tmp_path / "pipeline", config={"components": {"contextembed": {"encoder": {"device": "cpu"}}}})
    assert [(e.text, e.label_) for e in loaded(train[0][0]).ents] == [(e.text, e.label_) for e in doc.ents]


def test_pretraining_on_the_gpu_loads_back_on_the_cpu(tmp_path, gpu):
    from contextembed.pretraining import (BiLMConfig, MLMConfig, StaticConfig, TrainingOptions, pretrain_bilm,
                                          pretrain_mlm, pretrain_static)

    words = ["the", "cat", "saw", "a", "dog", "in", "Brussels", "on", "Tuesday", "Peter", "met", "Maria"]
    rng = np.random.default_rng(0)
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n\n".join("\n".join(" ".join(rng.choice(words, 7)) + " ." for _ in range(8))
                                  for _ in range(24)) + "\n", encoding="utf-8")
    size = tmp_path / "tiny.json"
    size.write_text('{"preset": "tiny", "num_hidden_layers": 1, "hidden_size": 32, "num_attention_heads": 2, '
                    '"intermediate_size": 64}', encoding="utf-8")
    precisions = ["fp32", "bf16"] if not gpu.startswith("cuda") or torch.cuda.is_bf16_supported() else ["fp32"]
    for precision in precisions:
        training = TrainingOptions(max_steps=4, batch_size=8, learning_rate=1e-3, log_every=2, checkpoint_every=2,
                                   device=gpu, show_progress=False, held_out_fraction=0.2, precision=precision)
        mlm = pretrain_mlm(corpus, tmp_path / f"mlm-{precision}",
                           MLMConfig(size=str(size), vocab_size=120, max_length=32, nsp=True, min_frequency=1), training)
        bilm = pretrain_bilm(corpus, tmp_path / f"bilm-{precision}",
                             BiLMConfig(size="tiny", n_layers=2, min_count=1, softmax="adaptive", cutoffs=[4, 8]),
                             training)
        for summary, out in ((mlm, f"mlm-{precision}"), (bilm, f"bilm-{precision}")):
            assert all(np.isfinite(v) for v in _losses(summary))
            (features,) = load_encoder(str(tmp_path / out), device="cpu", precision="fp32").encode([["the", "cat"]])
            assert features.shape[-2] == 2 and np.isfinite(features).all()
    static = pretrain_static(corpus, tmp_path / "static", StaticConfig(dim=16, epochs=2, min_count=1, batch_size=256,
                                                                       device=gpu, show_progress=False, sample=0))
    (features,) = load_encoder(static["binary"]).encode([["the", "cat", "unknownword"]])
    assert features.shape == (1, 3, 16) and features[0, :2].any() and not features[0, 2].any()


def _losses(summary: dict) -> list[float]:
    return [value for key, value in summary.items() if "loss" in key and isinstance(value, (int, float))]


def test_distill_with_a_gpu_teacher_matches_the_cpu(tiny_bert_dir, gpu, tmp_path):
    corpus = [s for s in SENTENCES if s] * 2
    cpu = distill(load_encoder(str(tiny_bert_dir), device="cpu", precision="fp32"), corpus=corpus)
    on_gpu = distill(load_encoder(str(tiny_bert_dir), device=gpu, precision="fp32"), tmp_path / "distilled",
                     corpus=corpus)
    assert cpu.words == on_gpu.words
    assert np.abs(cpu.table - on_gpu.table).max() < FP32_TOLERANCE
    assert load_encoder(str(tmp_path / "distilled")).words == on_gpu.words
