import json
import subprocess
import sys

import numpy as np
import pytest

from contextembed.cli import main

TEXT = "the quick fox\n\nNew York Times unaffable\n"


@pytest.fixture
def inputs(tmp_path):
    (tmp_path / "in.txt").write_text(TEXT, encoding="utf-8")
    (tmp_path / "in.conll").write_text(
        "-DOCSTART- -X- O O\n\nthe DT O O\nfox NN O O\n\nNew NNP O B-LOC\nYork NNP O I-LOC\n", encoding="utf-8"
    )
    (tmp_path / "in.jsonl").write_text(
        json.dumps({"tokens": ["the", "fox"]}) + "\n" + json.dumps({"text": "New York"}) + "\n", encoding="utf-8"
    )
    return tmp_path


def test_info(tiny_bert_dir, capsys):
    assert main(["info", str(tiny_bert_dir)]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["n_layers"] == 3 and info["width"] == 32 and info["max_length"] == 40
    assert info["vocab_size"] > 100


@pytest.mark.parametrize("name, lengths", [("in.txt", [3, 0, 4]), ("in.conll", [2, 2]), ("in.jsonl", [2, 2])])
def test_embed_word_level(tiny_bert_dir, inputs, name, lengths):
    out = inputs / "out.npz"
    assert main(["embed", str(tiny_bert_dir), str(inputs / name), str(out), "--layers=-2,-1", "--quiet"]) == 0
    archive = np.load(out)
    assert archive["lengths"].tolist() == lengths
    assert archive["features"].shape == (sum(lengths), 64)


def test_embed_text_level_float16_npy(tiny_bert_dir, inputs):
    out = inputs / "out.npy"
    args = ["embed", str(tiny_bert_dir), str(inputs / "in.txt"), str(out), "--layers", "-1", "--level", "text",
            "--text-pooling", "max", "--dtype", "float16", "--quiet"]
    assert main(args) == 0
    features = np.load(out)
    assert features.shape == (3, 32) and features.dtype == np.float16
    assert np.all(features[1] == 0)


def test_embed_matches_library(tiny_bert_dir, inputs):
    from contextembed import load_encoder

    out = inputs / "out.npy"
    main(["embed", str(tiny_bert_dir), str(inputs / "in.txt"), str(out), "--layers", "all", "--combine", "sum", "--quiet"])
    encoder = load_encoder(str(tiny_bert_dir))
    want = np.concatenate([h.sum(0) for h in encoder.encode([l.split() for l in TEXT.splitlines()])])
    assert np.abs(np.load(out) - want).max() < 1e-5


def test_embed_errors(tiny_bert_dir, inputs, capsys):
    assert main(["embed", str(tiny_bert_dir), str(inputs / "in.txt"), str(inputs / "o.csv"), "--quiet"]) == 2
    assert "must end in .npy or .npz" in capsys.readouterr().err
    assert main(["embed", str(tiny_bert_dir), str(inputs / "in.txt"), str(inputs / "o.npy"), "--layers", "9"]) == 2
    assert "out of range" in capsys.readouterr().err
    assert not (inputs / "o.npy").exists()
    assert main(["embed", str(tiny_bert_dir), str(inputs / "missing.txt"), str(inputs / "o.npy")]) == 2
    assert main(["info", "no-such-model"]) == 2
    assert "never downloads" in capsys.readouterr().err


def test_console_module_runs(tiny_bert_dir):
    result = subprocess.run([sys.executable, "-m", "contextembed", "info", str(tiny_bert_dir)],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and '"n_layers": 3' in result.stdout
