"""The scikit-learn examples run end to end (on their built-in samples, with the tiny BERT)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_feature_based_ner_example(bert, tmp_path, monkeypatch, capsys):
    module = _load("feature_based_ner")
    monkeypatch.setattr(module, "DATA", tmp_path / "absent")
    plot = tmp_path / "weights.png"
    assert module.main(["--encoder", bert, "--plot", str(plot)]) == 0
    out = capsys.readouterr().out
    for row in ("embeddings", "second-to-last hidden", "last hidden", "sum last four hidden",
                "scalar mix last four", "concat last four hidden", "scalar mix all layers"):
        assert row in out
    if importlib.util.find_spec("matplotlib"):
        assert plot.stat().st_size > 0


@pytest.mark.slow
def test_text_classification_example(bert, tmp_path, monkeypatch, capsys):
    module = _load("sklearn_text_classification")
    monkeypatch.setattr(module, "DATA", tmp_path / "absent")
    monkeypatch.setattr(module, "GRID", {"textembedder__layers": [-1, [-2, -1]], "textembedder__combine": ["mean", "concat"]})
    assert module.main(["--encoder", bert]) == 0
    out = capsys.readouterr().out
    assert "grid search over 4 layer strategies" in out and "test accuracy" in out


def test_table7_rows_fit_any_encoder_depth():
    from contextembed.sklearn.experiments import TABLE7_ROWS, table7_configs

    assert table7_configs(13) == TABLE7_ROWS
    assert list(table7_configs(1)) == ["vectors"]
    shallow = table7_configs(3)
    assert shallow["concat last four hidden"] == {"layers": [-3, -2, -1], "combine": "concat"}
    assert shallow["last hidden"] == TABLE7_ROWS["last hidden"]
