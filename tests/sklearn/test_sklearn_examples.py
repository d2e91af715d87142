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
    plot = tmp_path / "weights.png"
    has_matplotlib = importlib.util.find_spec("matplotlib") is not None
    assert module.main(["--encoder", bert, "--data", str(tmp_path / "absent"),
                        *(["--plot", str(plot)] if has_matplotlib else [])]) == 0
    out, err = capsys.readouterr()
    for row in ("embeddings", "second-to-last hidden", "last hidden", "sum last four hidden",
                "scalar mix last four", "concat last four hidden", "scalar mix all layers"):
        assert row in out
    # the per-entity report of the best row: a header, one line per type of the sample's dev part, averages
    report = out[out.index("per entity type, dev, "):].splitlines()
    assert report[1].split() == ["precision", "recall", "f1-score", "support"]
    assert [line.split()[0] for line in report[2:5]] == ["LOC", "MISC", "PER"]
    assert [line.split()[-1] for line in report[2:5]] == ["1", "1", "3"]  # the dev sentences' entities
    assert [" ".join(line.split()[:2]) for line in report[6:9]] == ["micro avg", "macro avg", "weighted avg"]
    assert "encoding" not in err  # no bars unless --progress
    if has_matplotlib:
        assert plot.stat().st_size > 0


@pytest.mark.slow
def test_feature_based_ner_example_shows_progress_when_asked(bert, tmp_path, monkeypatch, capsys):
    module = _load("feature_based_ner")
    monkeypatch.setenv("CONTEXTEMBED_DATA", str(tmp_path))  # holds no conll2003/: the sample
    monkeypatch.setattr(module, "table7_configs", lambda n_layers: {"scalar mix all layers": {"layers": "all",
                                                                                                "combine": "scalar_mix"}})
    from contextembed.sklearn import clear_cache

    clear_cache()
    assert module.main(["--encoder", bert, "--progress"]) == 0
    err = capsys.readouterr().err
    assert "encoding:" in err and "scalar mix:" in err


@pytest.mark.slow
def test_text_classification_example(bert, tmp_path, monkeypatch, capsys):
    module = _load("sklearn_text_classification")
    monkeypatch.setenv("CONTEXTEMBED_DATA", str(tmp_path))  # holds no sst2/: the sample
    monkeypatch.setattr(module, "GRID", {"textembedder__layers": [-1, [-2, -1]], "textembedder__combine": ["mean", "concat"]})
    assert module.main(["--encoder", bert]) == 0
    out = capsys.readouterr().out
    assert "grid search over 4 layer strategies" in out and "test accuracy" in out


def test_table7_rows_fit_any_encoder_depth():
    from examples.table7 import TABLE7_ROWS, table7_configs

    assert table7_configs(13) == TABLE7_ROWS
    assert list(table7_configs(1)) == ["vectors"]
    shallow = table7_configs(3)
    assert shallow["concat last four hidden"] == {"layers": [-3, -2, -1], "combine": "concat"}
    assert shallow["last hidden"] == TABLE7_ROWS["last hidden"]


def test_feature_based_ner_checks_plot_dependency_before_working(tmp_path, monkeypatch, capsys):
    module = _load("feature_based_ner")
    monkeypatch.setitem(__import__("sys").modules, "matplotlib", None)  # not installed
    with pytest.raises(SystemExit, match=r'--plot needs matplotlib: pip install "\.\[plot\]"'):
        # a model that does not exist: the check must come before any loading or training
        module.main(["--encoder", str(tmp_path / "no-model"), "--plot", str(tmp_path / "w.png")])


def test_examples_say_loudly_when_they_fall_back_to_the_sample(tmp_path, capsys):
    ner = _load("feature_based_ner")
    train, dev = ner.load_data(False, tmp_path / "absent")
    assert len(train[0]) + len(dev[0]) == len(ner.SAMPLE)
    assert "WARNING: no CoNLL-2003 in" in capsys.readouterr().err
    text = _load("sklearn_text_classification")
    text.load_data(False, tmp_path / "absent.tsv")
    assert "WARNING: no SST-2 at" in capsys.readouterr().err
    with pytest.raises(SystemExit, match="(?s)pass --data DIR or set CONTEXTEMBED_DATA.*clips.uantwerpen.be/conll2003"):
        ner.load_data(True, tmp_path / "absent")
    with pytest.raises(SystemExit, match="(?s)pass --data FILE or set CONTEXTEMBED_DATA.*gluebenchmark.com"):
        text.load_data(True, tmp_path / "absent.tsv")


def test_examples_read_data_from_data_dir(tmp_path, capsys):
    (tmp_path / "train.txt").write_text("EU NNP B-NP B-ORG\nrejects VBZ B-VP O\n\n-DOCSTART- -X- O O\n\n"
                                        "Peter NNP B-NP B-PER\n")
    (tmp_path / "dev.txt").write_text("Blackburn NNP B-NP B-PER\n")
    train, dev = _load("feature_based_ner").load_data(False, tmp_path)
    assert train == ([["EU", "rejects"], ["Peter"]], [["B-ORG", "O"], ["B-PER"]], [0, 1]) and dev[0] == [["Blackburn"]]
    assert capsys.readouterr().err == ""
    (tmp_path / "sst.tsv").write_text("1\tgood film\n0\tbad film\n" * 300)
    (train_x, _), (test_x, _) = _load("sklearn_text_classification").load_data(False, tmp_path / "sst.tsv")
    assert len(train_x) == 300 and len(test_x) == 200


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::contextembed.encoders._base.LongPairWarning")  # the tiny BERT takes 40 pieces
def test_sentence_pairs_example(bert, tmp_path, capsys):
    module = _load("sentence_pairs")
    assert module.main(["--encoder", bert, "--data", str(tmp_path / "absent"), "--train-pairs", "24",
                        "--test-pairs", "12"]) == 0
    out = capsys.readouterr().out
    for row in ("joint pass, interactions", "joint pass, segments", "joint pass, cls", "two separate passes"):
        assert row in out


def test_sentence_pairs_reads_documents_and_balances_pairs(tmp_path):
    module = _load("sentence_pairs")
    (tmp_path / "train.txt").write_text(
        "-DOCSTART- -X- O O\n\nEU NNP B-NP B-ORG\nrejects VBZ B-VP O\n\nGerman JJ B-NP B-MISC\n\n"
        "-DOCSTART- -X- O O\n\nPeter NNP B-NP B-PER\n")
    assert module.read_documents(tmp_path / "train.txt") == [[["EU", "rejects"], ["German"]], [["Peter"]]]
    documents = [[s.split() for s in doc] for doc in module.SAMPLE]
    pairs, labels = module.make_pairs(documents, 40, seed=0)
    assert sum(labels) == 20
    where = {tuple(s): d for d, doc in enumerate(documents) for s in doc}
    assert all((where[tuple(a)] == where[tuple(b)]) == bool(y) for (a, b), y in zip(pairs, labels))


# -- where the examples find their data (issue 38 item 11) ----------------------------------------


def _corpora(root):
    """``root`` laid out as CONTEXTEMBED_DATA: conll2003/ (two documents) and sst2/ (GLUE's order)."""
    (root / "conll2003").mkdir(parents=True)
    (root / "conll2003" / "train.txt").write_text("-DOCSTART- -X- O O\n\nEU NNP B-NP B-ORG\n\n-DOCSTART- -X- O O\n\n"
                                                  "Peter NNP B-NP B-PER\n")
    (root / "conll2003" / "dev.txt").write_text("Blackburn NNP B-NP B-PER\n")
    (root / "sst2").mkdir()
    (root / "sst2" / "train.tsv").write_text("sentence\tlabel\n" + "good film \t1\nbad film \t0\n" * 300)
    return root


def test_examples_read_their_data_from_contextembed_data(tmp_path, monkeypatch, capsys):
    root = _corpora(tmp_path / "corpora")
    monkeypatch.setenv("CONTEXTEMBED_DATA", str(root))
    train, dev = _load("feature_based_ner").load_data(False)
    assert train == ([["EU"], ["Peter"]], [["B-ORG"], ["B-PER"]], [0, 1]) and dev[0] == [["Blackburn"]]
    (train_x, train_y), _ = _load("sklearn_text_classification").load_data(False)
    assert train_x[:2] == ["good film ", "bad film "] and train_y[:2] == [1, 0]
    train_docs, _ = _load("sentence_pairs").load_documents()
    assert train_docs == [[["EU"]], [["Peter"]]]
    assert capsys.readouterr().err == ""  # no fallback warning


@pytest.mark.parametrize("value, message", [("{missing}", "does not exist"), ("{file}", "is not a directory")])
def test_a_contextembed_data_that_is_no_directory_is_named(tmp_path, monkeypatch, value, message):
    from contextembed.errors import SettingError

    (tmp_path / "file").write_text("x")
    value = value.format(missing=tmp_path / "missing", file=tmp_path / "file")
    monkeypatch.setenv("CONTEXTEMBED_DATA", value)
    with pytest.raises(SettingError, match=f"CONTEXTEMBED_DATA=.*{message}"):
        _load("feature_based_ner").load_data(False)


@pytest.mark.parametrize("script, corpus, source", [  # an interpreter each: the quick tier runs the last
    pytest.param("feature_based_ner.py", "conll2003", "clips.uantwerpen.be/conll2003", marks=pytest.mark.slow),
    pytest.param("sentence_pairs.py", "conll2003", "clips.uantwerpen.be/conll2003", marks=pytest.mark.slow),
    pytest.param("sklearn_text_classification.py", "sst2/train.tsv", "gluebenchmark.com", marks=pytest.mark.slow),
    ("spacy_ner/run.py", "conll2003", "clips.uantwerpen.be/conll2003"),
])
def test_each_example_s_help_says_where_its_data_is_and_where_to_get_it(script, corpus, source):
    import subprocess
    import sys

    out = subprocess.run([sys.executable, str(EXAMPLES / script), "--help"], capture_output=True, text=True,
                         timeout=120, check=True).stdout
    assert f"$CONTEXTEMBED_DATA/{corpus}" in out and "--data" in out
    assert source in out
    assert ("tiny built-in sample" in out) == (script != "spacy_ner/run.py")  # the spaCy example has none
