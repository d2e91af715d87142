from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from contextembed.errors import ProvenanceError
from contextembed.pretraining import MLMConfig, pretrain_mlm
from contextembed.pretraining._mlm import nsp_pairs, pack_segments, tokenize_documents

from .conftest import make_documents, tiny_training, write_corpus


def test_pack_segments_keeps_every_id_in_order_within_budget():
    rng = np.random.default_rng(0)
    sentences = [list(range(start, start + n)) for start, n in zip(range(0, 10_000, 100), rng.integers(0, 40, 60))]
    sentences.append(list(range(20_000, 20_095)))  # longer than the budget: cut, not dropped
    segments = pack_segments(sentences, budget=16)
    assert all(segment.dtype == np.int32 for segment in segments)
    segments = [segment.tolist() for segment in segments]
    assert [i for segment in segments for i in segment] == [i for sentence in sentences for i in sentence]
    assert all(0 < len(segment) <= 16 for segment in segments)
    # a sentence that fits is never split across segments
    for sentence in sentences:
        if 0 < len(sentence) <= 16:
            assert any(
                segment[j : j + len(sentence)] == sentence for segment in segments for j in range(len(segment))
            )


def test_nsp_pairs_are_half_true_next_half_other_document():
    documents = [[[d, k] for k in range(5)] for d in range(40)]
    anchors = [(d, k) for d in range(40) for k in range(4)]
    pairs = nsp_pairs(documents, anchors, torch.Generator().manual_seed(0))
    labels = np.array([label for _, _, label in pairs])
    assert abs(labels.mean() - 0.5) < 0.06
    for (d, k), (first, second, label) in zip(anchors, pairs):
        assert first == [d, k]
        if label == 0:
            assert second == [d, k + 1]
        else:
            assert second[0] != d


def test_pretrain_writes_a_model_that_transformers_and_load_encoder_read(pretrained_mlm):
    from transformers import AutoModel, AutoTokenizer

    from contextembed import load_encoder

    out, summary = pretrained_mlm
    for name in ("config.json", "model.safetensors", "tokenizer.json", "log.jsonl", "held_out.json"):
        assert (out / name).is_file(), name
    model = AutoModel.from_pretrained(out, local_files_only=True)
    tokenizer = AutoTokenizer.from_pretrained(out, local_files_only=True)
    assert model.config.model_type == "bert" and len(tokenizer) == model.config.vocab_size > 100
    assert tokenizer.model_max_length == 32
    encoder = load_encoder(str(out), device="cpu")
    words = ["the", "old", "man", "visited", "Brussels", "unseenword"]
    (features,) = encoder.encode([words])
    assert features.shape == (2, len(words), 32) and np.isfinite(features).all()
    # the saved encoder weights are the trained ones, not a fresh initialisation
    state = torch.load(out / "checkpoints" / "step-00000004.pt", weights_only=True)["model"]
    trained = state["model.bert.embeddings.word_embeddings.weight"]
    torch.testing.assert_close(model.embeddings.word_embeddings.weight, trained)


def test_log_and_held_out_records(pretrained_mlm):
    out, summary = pretrained_mlm
    records = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
    steps = [r for r in records if "held_out" not in r]
    assert [r["step"] for r in steps] == [2, 4]
    for record in steps:
        assert {"step", "loss", "mlm_acc", "nsp_acc", "lr", "tokens_per_s", "mlm_loss", "nsp_loss"} <= set(record)
        assert 0 <= record["mlm_acc"] <= 1 and 0 <= record["nsp_acc"] <= 1 and record["tokens_per_s"] > 0
    assert steps[-1]["lr"] == 0.0  # linear decay ends at zero
    held = [r for r in records if "held_out" in r]
    assert [r["step"] for r in held] == [0, 4]
    assert summary["held_out"]["mlm_loss"] == held[-1]["held_out"]["mlm_loss"]
    assert json.loads((out / "held_out.json").read_text())["steps"] == 4
    assert sorted(p.name for p in (out / "checkpoints").glob("step-*.pt")) == ["step-00000002.pt", "step-00000004.pt"]


@pytest.mark.slow
def test_resume_continues_and_rejects_incompatible_checkpoints(tmp_path, corpus_file, tiny_size):
    config = MLMConfig(size=tiny_size, vocab_size=120, max_length=32, min_frequency=1)
    out = tmp_path / "run"
    pretrain_mlm(corpus_file, out, config, tiny_training(max_steps=2, checkpoint_every=2))
    summary = pretrain_mlm(corpus_file, out, config, tiny_training(max_steps=4), resume=True)
    assert summary["steps"] == 4 and summary["held_out_before"] is None
    records = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records if "held_out" not in r] == [2, 4]
    # a different architecture: clear error naming the difference
    with pytest.raises(ProvenanceError, match=r"was made with mlm\.nsp=false, but this run has mlm\.nsp=true"):
        pretrain_mlm(corpus_file, out, MLMConfig(size=tiny_size, vocab_size=120, max_length=32, min_frequency=1,
                                                 nsp=True), tiny_training(max_steps=6), resume=True)
    garbage = tmp_path / "garbage.pt"
    garbage.write_bytes(b"not a checkpoint")
    with pytest.raises(ValueError, match="cannot be read"):
        pretrain_mlm(corpus_file, out, config, tiny_training(max_steps=6), resume=garbage)


def test_out_with_files_needs_overwrite(tmp_path, corpus_file, tiny_size):
    out = tmp_path / "out"
    out.mkdir()
    (out / "something.txt").write_text("x")
    config = MLMConfig(size=tiny_size, vocab_size=120, max_length=32, min_frequency=1)
    with pytest.raises(FileExistsError, match="already holds files.*--overwrite"):
        pretrain_mlm(corpus_file, out, config, tiny_training(max_steps=1))
    with pytest.raises(FileNotFoundError, match="holds no step"):
        pretrain_mlm(corpus_file, out, config, tiny_training(max_steps=1), resume=True)


def test_init_continues_from_a_local_bert(tmp_path, corpus_file, pretrained_mlm):
    base, _ = pretrained_mlm
    out = tmp_path / "adapted"
    config = MLMConfig(init=str(base), max_length=32)
    summary = pretrain_mlm(corpus_file, out, config, tiny_training(max_steps=2))
    from transformers import AutoTokenizer

    adapted, original = (AutoTokenizer.from_pretrained(p, local_files_only=True) for p in (out, base))
    assert adapted.get_vocab() == original.get_vocab()
    assert adapted.model_max_length == original.model_max_length
    assert summary["held_out"]["mlm_loss"] < 10


def test_init_must_be_a_bert(tmp_path, corpus_file, tiny_roberta_dir):
    with pytest.raises(ValueError, match="holds a 'roberta' model"):
        pretrain_mlm(corpus_file, tmp_path / "o", MLMConfig(init=str(tiny_roberta_dir)), tiny_training())
    with pytest.raises(ValueError, match="no config.json"):
        pretrain_mlm(corpus_file, tmp_path / "o", MLMConfig(init=str(tmp_path)), tiny_training())


def test_bad_corpora(tmp_path, tiny_size):
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n")
    config = MLMConfig(size=tiny_size, vocab_size=120, max_length=32, min_frequency=1)
    with pytest.raises(ValueError, match="holds no sentences"):
        pretrain_mlm(empty, tmp_path / "o1", config, tiny_training())
    one_document = write_corpus(tmp_path / "one.txt", make_documents(1, 30))
    nsp = MLMConfig(size=tiny_size, vocab_size=120, max_length=32, min_frequency=1, nsp=True)
    with pytest.raises(ValueError, match="--nsp needs at least two documents"):
        pretrain_mlm(one_document, tmp_path / "o2", nsp, tiny_training(held_out_fraction=0.0))


@pytest.mark.slow
@pytest.mark.parametrize("megabytes", [1, pytest.param(10, marks=pytest.mark.slow)])
def test_a_huge_line_is_cut_into_examples_not_dropped(pretrained_mlm, megabytes):
    from transformers import AutoTokenizer

    out, _ = pretrained_mlm
    tokenizer = AutoTokenizer.from_pretrained(out, local_files_only=True)
    line = ("the old man saw a red car " * 40_000 * megabytes)[: megabytes * 1024 * 1024].strip()
    ((ids,),) = tokenize_documents(tokenizer, [[line]])
    assert len(ids) > 200_000 * megabytes
    segments = pack_segments([ids], budget=30)
    np.testing.assert_array_equal(np.concatenate(segments), ids)


def test_collated_rows_and_segment_types(tmp_path):
    from contextembed.pretraining._masking import IGNORE_INDEX
    from contextembed.pretraining._mlm import BertObjective, MLMConfig, SpecialIds

    ids = SpecialIds(cls=2, sep=3, pad=0, mask=4, random=torch.arange(5, 20))
    config = MLMConfig(size="tiny", max_length=16, nsp=True)
    objective = BertObjective([[[5, 6, 7, 8], [9, 10, 11]], [[12, 13]]], [], ids, config, seed=0, fingerprint={})
    batch = objective._collate([(np.array([5, 6, 7], np.int32), np.array([8, 9], np.int32), 0),
                                (np.array([10], np.int32), None, -1)], torch.Generator().manual_seed(0))
    labels = batch["labels"]
    unmasked = torch.where(labels != IGNORE_INDEX, labels, batch["input_ids"])
    assert unmasked.tolist() == [[2, 5, 6, 7, 3, 8, 9, 3], [2, 10, 3, 0, 0, 0, 0, 0]]
    assert batch["token_type_ids"].tolist() == [[0, 0, 0, 0, 0, 1, 1, 1], [0] * 8]
    assert batch["attention_mask"].tolist() == [[1] * 8, [1, 1, 1, 0, 0, 0, 0, 0]]


def test_out_may_not_be_the_init_model(tmp_path, corpus_file, tiny_bert_dir):
    import shutil

    init = tmp_path / "bert"
    shutil.copytree(tiny_bert_dir, init)
    before = {path.name: path.read_bytes() for path in init.iterdir()}
    config = MLMConfig(init=str(init), max_length=32)
    for out in (init, init / "continued"):
        with pytest.raises(ValueError, match=r"OUT .* (is|lies inside) --init .*bert \("):
            pretrain_mlm(corpus_file, out, config, tiny_training(max_steps=1), overwrite=True)
    assert {path.name: path.read_bytes() for path in init.iterdir()} == before
