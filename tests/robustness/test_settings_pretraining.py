"""Every numeric setting of ``contextembed pretrain`` (and of the library's settings classes) is
checked before any work: a number that is not finite, out of range, of the wrong type or written
with other than ASCII digits is refused naming the setting and its range, and OUT is never created.

Before: ``--lr 1e40`` trained until an overflow ``RuntimeError``; ``--lr nan|inf`` and ``--sample
nan`` failed only after training or with a misleading message; ``'٣'`` read as 3."""

from __future__ import annotations

import math

import pytest

from contextembed.cli import main
from contextembed.pretraining import BiLMConfig, MaskingOptions, MLMConfig, StaticConfig, TrainingOptions
from pretraining.conftest import TINY_FIELDS, make_documents, write_corpus


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return write_corpus(tmp_path_factory.mktemp("corpus") / "corpus.txt", make_documents(6, 4))


@pytest.fixture(scope="module")
def size(tmp_path_factory):
    import json

    path = tmp_path_factory.mktemp("size") / "tiny.json"
    path.write_text(json.dumps(TINY_FIELDS), encoding="utf-8")
    return str(path)


def _refused(argv, capsys) -> str:
    """Run the CLI; it must refuse (status 2, argparse's or ours) and return its stderr."""
    try:
        status = main(argv)
    except SystemExit as stop:
        status = stop.code
    assert status == 2
    return capsys.readouterr().err


def _command(objective, corpus, out, size):
    common = [str(corpus), str(out), "--quiet"]
    if objective == "mlm":
        return ["pretrain", "mlm", *common, "--size", size, "--vocab-size", "120", "--min-frequency", "1",
                "--max-length", "32", "--max-steps", "2", "--batch-size", "4", "--device", "cpu"]
    if objective == "bilm":
        return ["pretrain", "bilm", *common, "--n-layers", "1", "--min-count", "1", "--max-steps", "2",
                "--batch-size", "4", "--device", "cpu"]
    return ["pretrain", "static", *common, "--min-count", "1", "--dim", "8", "--epochs", "1", "--device", "cpu"]


LEARNING_RATES = ["1e40", "nan", "inf", "-inf", "-1", "0", "²", "٣", "1_0", " 1e-3", "0x10", ""]


@pytest.mark.parametrize("objective", ["mlm", "bilm", "static"])
@pytest.mark.parametrize("value", LEARNING_RATES)
def test_bad_learning_rates_are_refused_before_any_work(objective, value, corpus, size, tmp_path, capsys):
    out = tmp_path / "out"
    err = _refused(_command(objective, corpus, out, size) + [f"--lr={value}"], capsys)
    assert "--lr" in err and "(0, 1e+06]" in err and repr(value) in err
    assert not out.exists()


@pytest.mark.parametrize(("option", "value", "expected"), [
    ("--sample", "nan", "[0, 1]"),
    ("--sample", "-0.5", "[0, 1]"),
    ("--sample", "inf", "[0, 1]"),
    ("--dim", "0", "[1, 10000]"),
    ("--dim", "1e9", "[1, 10000]"),
    ("--window", "٣", "[1, 100]"),
    ("--epochs", "²", "[1, 10000]"),
    ("--batch-size", "2.5", "[1, 1048576]"),
    ("--negative", "-1", "[1, 100]"),
    ("--seed", "-1", "[0, 4294967295]"),
    ("--seed", "٣", "[0, 4294967295]"),
])
def test_static_settings(option, value, expected, corpus, tmp_path, capsys):
    out = tmp_path / "out"
    err = _refused(_command("static", corpus, out, None) + [f"{option}={value}"], capsys)
    assert f"argument {option}" in err and expected in err
    assert not out.exists()


@pytest.mark.parametrize(("option", "value", "expected"), [
    ("--max-steps", "٣", "[1, 1e+09]"),
    ("--max-steps", "0", "[1, 1e+09]"),
    ("--warmup-steps", "-1", "[0, 1e+09]"),
    ("--weight-decay", "nan", "[0, 1]"),
    ("--max-grad-norm", "inf", "[0, 1e+06]"),
    ("--held-out-fraction", "0.9", "[0, 0.5]"),
    ("--checkpoint-every", "-2", "[0, 1e+09]"),
    ("--grad-accumulation", "0", "[1, 65536]"),
    ("--mask-probability", "1", "(0, 1)"),
    ("--mask-probability", "nan", "(0, 1)"),
    ("--max-length", "4", "[8, 65536]"),
    ("--vocab-size", "१२०", "[100, 1e+06]"),
])
def test_mlm_settings(option, value, expected, corpus, size, tmp_path, capsys):
    out = tmp_path / "out"
    err = _refused(_command("mlm", corpus, out, size) + [f"{option}={value}"], capsys)
    assert f"argument {option}" in err and expected in err
    assert not out.exists()


@pytest.mark.parametrize(("option", "value", "expected"), [
    ("--dropout", "1", "[0, 1)"),
    ("--dropout", "nan", "[0, 1)"),
    ("--cutoffs", "10,²", "[1, 1e+08]"),
    ("--cutoffs", "0,10", "[1, 1e+08]"),
    ("--n-layers", "0", "[1, 64]"),
])
def test_bilm_settings(option, value, expected, corpus, tmp_path, capsys):
    out = tmp_path / "out"
    err = _refused(_command("bilm", corpus, out, None) + [f"{option}={value}"], capsys)
    assert f"argument {option}" in err and expected in err
    assert not out.exists()


def test_a_warmup_longer_than_the_run_is_refused_before_any_work(corpus, size, tmp_path, capsys):
    out = tmp_path / "out"
    err = _refused(_command("mlm", corpus, out, size) + ["--warmup-steps", "5"], capsys)
    assert "warmup_steps=5 (--warmup-steps)" in err and "max_steps=2" in err
    assert not out.exists()


@pytest.mark.parametrize(("make", "error", "message"), [
    (lambda: TrainingOptions(learning_rate=float("nan")), ValueError, r"learning_rate=nan \(--lr\) is out of range"),
    (lambda: TrainingOptions(learning_rate=1e40), ValueError, r"learning_rate=1e\+40 \(--lr\)"),
    (lambda: TrainingOptions(learning_rate=-1.0), ValueError, r"expected a finite number in \(0, 1e\+06\]"),
    (lambda: TrainingOptions(learning_rate="0.001"), TypeError, r"learning_rate='0.001' \(--lr\) is a str"),
    (lambda: TrainingOptions(max_steps=True), TypeError, r"max_steps=True \(--max-steps\) is a bool"),
    (lambda: TrainingOptions(batch_size=2.0), TypeError, r"batch_size=2.0 \(--batch-size\) is a float"),
    (lambda: TrainingOptions(max_grad_norm=math.inf), ValueError, r"max_grad_norm=inf \(--max-grad-norm\)"),
    (lambda: TrainingOptions(seed=2**40), ValueError, r"seed=1099511627776 \(--seed\)"),
    (lambda: StaticConfig(sample=float("nan")), ValueError, r"sample=nan \(--sample\) is out of range"),
    (lambda: StaticConfig(learning_rate=float("inf")), ValueError, r"learning_rate=inf \(--lr\)"),
    (lambda: StaticConfig(max_vocab=0), ValueError, r"max_vocab=0 \(--max-vocab\)"),
    (lambda: MaskingOptions(mask_probability=float("nan")), ValueError, r"mask_probability=nan"),
    (lambda: MaskingOptions(replace_with_mask=0.8, replace_with_random=0.5), ValueError, "sum to at most 1"),
    (lambda: BiLMConfig(dropout=float("nan")), ValueError, r"dropout=nan \(--dropout\)"),
    (lambda: BiLMConfig(cutoffs=[20, 10]), ValueError, r"strictly increasing"),
    (lambda: MLMConfig(vocab_size=10**9), ValueError, r"vocab_size=1000000000 \(--vocab-size\)"),
])
def test_library_settings_name_the_setting_and_the_range(make, error, message):
    with pytest.raises(error, match=message):
        make()


def test_a_size_file_with_a_bad_number_is_refused_before_training(corpus, tmp_path, capsys):
    import json

    path = tmp_path / "size.json"
    path.write_text(json.dumps({"num_hidden_layers": 1, "hidden_size": 30, "num_attention_heads": 4}))
    out = tmp_path / "out"
    err = _refused(_command("mlm", corpus, out, str(path)), capsys)
    assert "hidden_size=30 is not a multiple of num_attention_heads=4" in err and str(path) in err
    assert not (out / "checkpoints").exists()
    path.write_text(json.dumps({"hidden_size": -32}))
    err = _refused(_command("mlm", corpus, tmp_path / "out2", str(path)), capsys)
    assert "hidden_size=-32 (--size file) is out of range" in err
