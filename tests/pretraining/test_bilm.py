from __future__ import annotations

import numpy as np
import pytest
import torch

from contextembed.errors import ProvenanceError
from contextembed.pretraining import BiLMConfig, pretrain_bilm
from contextembed.pretraining._bilm import BiLMLanguageModel, WordVocabulary, cut_sentences

from .conftest import tiny_training


def test_vocabulary_order_and_ids():
    vocabulary = WordVocabulary.build([["b", "a", "b"], ["c", "b", "a", "<S>"]], max_vocab=10, min_count=2,
                                      lowercase=False)
    assert vocabulary.words == ["<S>", "</S>", "<UNK>", "b", "a"]
    assert vocabulary.ids(["a", "zzz", "b"]) == [0, 4, 2, 3, 1]
    lower = WordVocabulary.build([["The", "the"]], 10, 1, lowercase=True)
    assert lower.words == ["<S>", "</S>", "<UNK>", "the"] and lower.ids(["THE"]) == [0, 3, 1]


def test_cut_sentences_keeps_every_word():
    sentences = [list("abcdefg"), [], list("xy")]
    assert cut_sentences(sentences, 3) == [list("abc"), list("def"), ["g"], list("xy")]


def _tiny_model(softmax, vocab_size=30):
    from contextembed.encoders._elmo import elmo_options

    torch.manual_seed(0)
    return BiLMLanguageModel(elmo_options("tiny", n_layers=2), vocab_size, softmax=softmax, cutoffs=[5, 12],
                             dropout=0.0).eval()


def test_bidirectional_loss_matches_a_loop_reference():
    from contextembed.encoders._elmo import sentence_char_ids

    model = _tiny_model("full")
    sentences = [["a", "bb", "ccc"], ["dd"]]
    tokens = [[0, 5, 6, 7, 1], [0, 8, 1]]
    char_ids, _ = sentence_char_ids(sentences)
    padded = torch.full((2, 5), -100)
    for row, ids in enumerate(tokens):
        padded[row, : len(ids)] = torch.tensor(ids)
    with torch.no_grad():
        forward_nll, backward_nll, count = model(torch.from_numpy(char_ids), padded)
        states = model.encoder(torch.from_numpy(char_ids))
        weight, bias = model.softmax.weight.numpy(), model.softmax.bias.numpy()
    expected_forward = expected_backward = 0.0
    for row, ids in enumerate(tokens):
        for t in range(1, len(ids)):
            for state, target, is_forward in ((states.forward[-1][row, t - 1], ids[t], True),
                                              (states.backward[-1][row, t], ids[t - 1], False)):
                logits = weight @ state.numpy() + bias
                nll = -(logits[target] - np.log(np.exp(logits).sum()))
                if is_forward:
                    expected_forward += nll
                else:
                    expected_backward += nll
    assert int(count) == 4 + 2
    assert float(forward_nll) == pytest.approx(expected_forward, rel=1e-5)
    assert float(backward_nll) == pytest.approx(expected_backward, rel=1e-5)


def test_adaptive_softmax_is_a_distribution():
    model = _tiny_model("adaptive")
    assert isinstance(model.softmax, torch.nn.AdaptiveLogSoftmaxWithLoss) and model.cutoffs == [5, 12]
    hidden = torch.randn(1, model.encoder.projection_dim).expand(30, -1)
    with torch.no_grad():
        total = model.log_prob(hidden, torch.arange(30)).exp().sum()
    assert float(total) == pytest.approx(1.0, abs=1e-5)
    assert isinstance(_tiny_model("auto").softmax, torch.nn.Linear)


@pytest.fixture(scope="module")
def pretrained_bilm(tmp_path_factory, corpus_file):
    out = tmp_path_factory.mktemp("bilm_out")
    config = BiLMConfig(size="tiny", n_layers=2, min_count=1, softmax="adaptive", cutoffs=[10, 20])
    summary = pretrain_bilm(corpus_file, out, config, tiny_training(max_steps=3))
    return out, summary


@pytest.mark.slow
def test_pretrain_bilm_writes_an_elmo_directory_that_load_encoder_reads(pretrained_bilm):
    from safetensors.torch import load_file

    from contextembed import load_encoder
    from contextembed.encoders._elmo import load_bilm, sentence_char_ids

    out, summary = pretrained_bilm
    for name in ("options.json", "weights.hdf5", "vocab.txt", "softmax.safetensors", "log.jsonl"):
        assert (out / name).is_file(), name
    assert summary["steps"] == 3 and summary["held_out"]["perplexity"] > 1
    encoder = load_encoder(str(out), device="cpu", precision="fp32")
    assert encoder.family == "elmo" and encoder.n_layers == 3 and encoder.width == 32
    sentence = ["Peter", "visited", "Brussels", "."]
    (features,) = encoder.encode([sentence])
    # the same numbers as the module read back from disk, and the trained weights are kept
    module = load_bilm(out).eval()
    state = torch.load(out / "checkpoints" / "step-00000003.pt", weights_only=True)["model"]
    for name, value in module.state_dict().items():
        torch.testing.assert_close(value, state[f"encoder.{name}"])
    with torch.no_grad():
        char_ids, _ = sentence_char_ids([sentence])
        expected = module(torch.from_numpy(char_ids)).layers()[:, 0, 1:-1].numpy()
    np.testing.assert_allclose(features, expected, rtol=1e-4, atol=1e-5)
    assert "tail.0.0.weight" in load_file(str(out / "softmax.safetensors"))
    assert (out / "vocab.txt").read_text().splitlines()[:3] == ["<S>", "</S>", "<UNK>"]


@pytest.mark.slow
def test_bilm_resume_rejects_another_architecture(tmp_path, corpus_file, pretrained_bilm):
    import shutil

    out = tmp_path / "copy"
    shutil.copytree(pretrained_bilm[0], out)
    config = BiLMConfig(size="tiny", n_layers=1, min_count=1, softmax="adaptive", cutoffs=[10, 20])
    with pytest.raises(ProvenanceError, match="was made with bilm.n_layers=2, but this run has bilm.n_layers=1"):
        pretrain_bilm(corpus_file, out, config, tiny_training(max_steps=4), resume=True)
    same = BiLMConfig(size="tiny", n_layers=2, min_count=1, softmax="adaptive", cutoffs=[10, 20])
    assert pretrain_bilm(corpus_file, out, same, tiny_training(max_steps=4), resume=True)["steps"] == 4


def test_bilm_config_errors():
    with pytest.raises(ValueError, match="softmax='sampled'"):
        BiLMConfig(softmax="sampled")
    with pytest.raises(ValueError, match="size='huge'"):
        BiLMConfig(size="huge")


@pytest.mark.slow
def test_init_continues_from_an_elmo_directory(tmp_path, corpus_file, pretrained_bilm):
    base, base_summary = pretrained_bilm
    config = BiLMConfig(init=str(base), size="small", n_layers=1)  # size and n_layers are ignored
    assert config.options["lstm"]["n_layers"] == 2
    summary = pretrain_bilm(corpus_file, tmp_path / "adapted", config, tiny_training(max_steps=1))
    # same encoder, vocabulary and LM head: the held-out loss starts where the base run ended
    assert (tmp_path / "adapted" / "vocab.txt").read_text() == (base / "vocab.txt").read_text()
    before, ended = summary["held_out_before"], base_summary["held_out"]
    assert before["forward_loss"] == pytest.approx(ended["forward_loss"], rel=1e-5)
    assert before["backward_loss"] == pytest.approx(ended["backward_loss"], rel=1e-5)
    with pytest.raises(ValueError, match="is not an ELMo directory"):
        BiLMConfig(init=str(tmp_path))


@pytest.mark.slow
def test_init_without_a_saved_lm_head_builds_a_new_vocabulary(tmp_path, corpus_file, pretrained_bilm):
    import shutil

    from contextembed.encoders._elmo import load_bilm

    base = tmp_path / "bare"
    base.mkdir()
    for name in ("options.json", "weights.hdf5"):
        shutil.copy(pretrained_bilm[0] / name, base / name)
    config = BiLMConfig(init=str(base), max_vocab=10, softmax="full")
    pretrain_bilm(corpus_file, tmp_path / "adapted", config, tiny_training(max_steps=1, learning_rate=1e-9,
                                                                            warmup_steps=0))
    words = (tmp_path / "adapted" / "vocab.txt").read_text().splitlines()
    assert len(words) == 13 and words[:3] == ["<S>", "</S>", "<UNK>"]
    # the encoder started from the init weights (one step at a negligible learning rate)
    adapted, original = load_bilm(tmp_path / "adapted"), load_bilm(base)
    for name, value in original.state_dict().items():
        torch.testing.assert_close(adapted.state_dict()[name], value, atol=1e-6, rtol=1e-5)


@pytest.mark.slow
def test_bf16_autocast_trains_the_adaptive_softmax_and_evaluates(tmp_path, corpus_file):
    """bf16 autocast: the LSTM's in-place step and the adaptive softmax's fp32 buffer took bf16 rows."""
    import math

    from contextembed import load_encoder

    config = BiLMConfig(size="tiny", n_layers=2, min_count=1, softmax="adaptive", cutoffs=[4, 8])
    summary = pretrain_bilm(corpus_file, tmp_path / "out", config, tiny_training(max_steps=2, precision="bf16"))
    losses = [value for key, value in summary.items() if "loss" in key and isinstance(value, float)]
    assert losses and all(math.isfinite(value) for value in losses)
    (features,) = load_encoder(str(tmp_path / "out"), device="cpu", precision="fp32").encode([["the", "cat"]])
    assert np.isfinite(features).all()
