"""A directory or glob of inputs: one output per input, resumable, never a partial output taken for complete."""

from __future__ import annotations

import json
import os
import re

import numpy as np
import pytest

from contextembed.cli import main
from contextembed.corpus import embed_corpus, find_inputs, is_corpus, plan
from contextembed.encoders._identity import identify
from contextembed.errors import FileFormatError, ProvenanceError
from contextembed.io import embed_file, read_output_record, read_output_shape
from contextembed._runtime.provenance import file_hash

WORDS = "the quick brown fox jumps over lazy dog New York".split()


@pytest.fixture(scope="module")
def vectors(tmp_path_factory) -> str:
    from contextembed.encoders import write_word2vec

    path = tmp_path_factory.mktemp("corpus_vectors") / "vectors.txt"
    write_word2vec(path, WORDS, np.random.RandomState(1).randn(len(WORDS), 5).astype(np.float32))
    return str(path)


@pytest.fixture
def corpus(tmp_path):
    root = tmp_path / "corpus"
    (root / "news" / "2024").mkdir(parents=True)
    (root / "a.txt").write_text("the quick fox\n\nNew York\n", encoding="utf-8")
    (root / "news" / "b.jsonl").write_text(json.dumps({"tokens": ["the", "dog"]}) + "\n", encoding="utf-8")
    (root / "news" / "2024" / "c.conll").write_text("lazy X\ndog X\n\nover X\n", encoding="utf-8")
    (root / "notes.md").write_text("not an input", encoding="utf-8")
    return root


def test_a_directory_gives_one_output_per_input_with_the_same_relative_name(vectors, corpus, tmp_path):
    summary = embed_corpus(vectors, str(corpus), str(tmp_path / "out"), show_progress=False)
    assert summary["files"] == summary["embedded"] == 3
    relative = [os.path.relpath(p, tmp_path / "out") for p in summary["outputs"]]
    assert relative == ["a.npz", os.path.join("news", "2024", "c.npz"), os.path.join("news", "b.npz")]
    for path, source in zip(summary["outputs"], ["a.txt", "news/2024/c.conll", "news/b.jsonl"]):
        single = tmp_path / "single.npz"
        embed_file(vectors, str(corpus / source), str(single), show_progress=False, overwrite=True)
        for key in ("features", "lengths"):
            np.testing.assert_array_equal(np.load(path)[key], np.load(single)[key])


def test_a_glob_is_rooted_before_its_first_wildcard(vectors, corpus, tmp_path):
    root, inputs = find_inputs(str(corpus / "news" / "**" / "*.*"))
    assert root == str(corpus / "news") and [os.path.basename(p) for p in inputs] == ["c.conll", "b.jsonl"]
    jobs = plan(str(corpus / "**" / "*.txt"), str(tmp_path / "out"), "npy")
    assert [os.path.relpath(j.output, tmp_path / "out") for j in jobs] == ["a.npy"]
    assert is_corpus(str(corpus)) and is_corpus(str(corpus / "*.txt")) and not is_corpus(str(corpus / "a.txt"))
    with pytest.raises(FileNotFoundError, match="no input files"):
        find_inputs(str(corpus / "*.conllu"))


def test_a_second_run_skips_complete_outputs_and_redoes_missing_ones(vectors, corpus, tmp_path):
    out = tmp_path / "out"
    embed_corpus(vectors, str(corpus), str(out), show_progress=False)
    (out / "a.npz").unlink()
    stamp = os.stat(out / "news" / "b.npz").st_mtime_ns
    (out / ".a.npz.0badc0de.partial").write_bytes(b"left by a killed run")  # never taken for an output
    summary = embed_corpus(vectors, str(corpus), str(out), show_progress=False)
    assert (summary["embedded"], summary["skipped"]) == (1, 2)
    assert os.stat(out / "news" / "b.npz").st_mtime_ns == stamp
    assert read_output_shape(str(out / "a.npz")) == (5, 5)
    redone = embed_corpus(vectors, str(corpus), str(out), show_progress=False, overwrite=True)
    assert redone["embedded"] == 3


def test_an_existing_output_that_disagrees_with_its_input_is_an_error(vectors, corpus, tmp_path):
    out = tmp_path / "out"
    embed_corpus(vectors, str(corpus), str(out), show_progress=False)
    (corpus / "a.txt").write_text("the quick fox jumps\n", encoding="utf-8")
    with pytest.raises(ProvenanceError, match=r"output .*a\.npz \(of input .*a\.txt\) was made with input=.*"
                       r"the input's text changed since.*pass --overwrite") as caught:
        embed_corpus(vectors, str(corpus), str(out), show_progress=False)
    assert caught.value.field == "input"
    (out / "a.npz").write_bytes(b"garbage")
    with pytest.raises(FileFormatError, match="not a contextembed output.*cannot be reused: pass --overwrite"):
        embed_corpus(vectors, str(corpus), str(out), show_progress=False)


def test_every_output_records_its_provenance(vectors, corpus, tmp_path):
    embed_corpus(vectors, str(corpus), str(tmp_path / "z"), show_progress=False)
    embed_corpus(vectors, str(corpus), str(tmp_path / "y"), output_format="npy", level="text", text_pooling="mean",
                 show_progress=False)
    archive = np.load(tmp_path / "z" / "a.npz")  # allow_pickle=False: the record is plain bytes
    assert sorted(archive.files) == ["features", "lengths", "provenance"] and archive["provenance"].dtype == np.uint8
    record = read_output_record(str(tmp_path / "z" / "a.npz"))
    assert record == json.loads(archive["provenance"].tobytes())
    assert record["artifact"] == "embedding output" and record["input"] == file_hash(corpus / "a.txt")
    assert record["model"] == identify(vectors).fingerprint
    options = ("input_format", "tokenizer", "level", "layers", "combine", "dtype", "output_format")
    assert {name: record[name] for name in options} == {
        "input_format": "text", "tokenizer": "whitespace", "level": "word", "layers": [0], "combine": "concat",
        "dtype": "float32", "output_format": "npz"}
    assert record["content"]["rows"] == 5 and record["content"]["dim"] == 5
    beside = tmp_path / "y" / "news" / "b.npy.provenance.json"
    assert sorted(os.listdir(beside.parent)) == ["2024", "b.npy", "b.npy.provenance.json"]
    assert read_output_record(str(tmp_path / "y" / "news" / "b.npy")) == json.loads(beside.read_text())
    assert json.loads(beside.read_text())["text_pooling"] == "mean"


def test_a_missing_input_or_empty_glob_says_so_before_any_format_question(vectors, corpus, tmp_path):
    with pytest.raises(FileNotFoundError, match=r"input file '.*sample\.text' does not exist"):
        embed_file(vectors, str(tmp_path / "sample.text"), str(tmp_path / "o.npz"))
    with pytest.raises(FileNotFoundError, match=r"input file '.*corpusx/' does not exist"):
        embed_file(vectors, str(tmp_path / "corpusx") + "/", str(tmp_path / "o.npz"))
    (tmp_path / "sample.text").write_text("the fox\n", encoding="utf-8")
    with pytest.raises(ValueError, match="cannot tell the format .*pass --format"):  # it exists: now the format
        embed_file(vectors, str(tmp_path / "sample.text"), str(tmp_path / "o.npz"))
    with pytest.raises(FileNotFoundError, match=r"glob '.*corpusx/\*\.txt': its directory '.*corpusx' does not exist"):
        embed_corpus(vectors, str(tmp_path / "corpusx" / "*.txt"), str(tmp_path / "out"))
    with pytest.raises(FileNotFoundError, match=r"no input files match the glob '.*\*\.conllu'"):
        embed_corpus(vectors, str(corpus / "**" / "*.conllu"), str(tmp_path / "out"))
    assert not (tmp_path / "out").exists()


def test_inputs_that_would_share_an_output_are_refused(corpus, tmp_path):
    (corpus / "a.jsonl").write_text(json.dumps({"text": "the dog"}) + "\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"a\.jsonl and .*a\.txt would both be written to .*a\.npz"):
        plan(str(corpus), str(tmp_path / "out"))


def _summary(captured) -> dict:
    """The summary line the command prints last (on stdout)."""
    return json.loads(captured.out.strip().splitlines()[-1])


def test_the_cli_embeds_a_corpus_and_resumes(vectors, corpus, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["embed", vectors, str(corpus), str(out), "--quiet", "--level", "text", "--output-format", "npy"]) == 0
    captured = capsys.readouterr()
    assert _summary(captured) == {"files": 3, "embedded": 3, "skipped": 0, "backend": "numpy", "precision": None}
    assert "files" not in captured.err  # --quiet: no bar
    assert np.load(out / "a.npy").shape == (3, 5)  # text level: one row per line, the blank one too
    assert main(["embed", vectors, str(corpus / "**" / "*.*[tl]"), str(out), "--quiet", "--level", "text",
                 "--output-format", "npy"]) == 0
    resumed = _summary(capsys.readouterr())
    assert resumed["skipped"] == 3 and resumed["backend"] is None  # nothing embedded, nothing ran
    (tmp_path / "file").write_text("x")
    assert main(["embed", vectors, str(corpus), str(tmp_path / "file"), "--quiet"]) == 2
    assert "is a file; with a directory or glob of inputs, OUTPUT is a directory" in capsys.readouterr().err
    assert main(["embed", vectors, str(corpus / "a.txt"), str(tmp_path / "x.npz"), "--engine", "ray"]) == 2
    assert "--engine ray shards by files" in capsys.readouterr().err
    assert main(["embed", vectors, str(corpus / "a.txt"), str(tmp_path / "x.npz"), "--concurrency", "2"]) == 2
    assert "--concurrency applies to --engine ray only" in capsys.readouterr().err


def test_read_output_shape_checks_the_lengths(tmp_path):
    path = tmp_path / "out.npz"
    np.savez(path, features=np.zeros((4, 3), np.float32), lengths=np.array([1, 2]))
    with pytest.raises(FileFormatError, match="'lengths' add up to 3 tokens but 'features' has 4 rows"):
        read_output_shape(str(path))
    np.save(tmp_path / "out.npy", np.zeros((2, 3), np.float32))
    assert read_output_shape(str(tmp_path / "out.npy")) == (2, 3)


# -- progress and resuming ---------------------------------------------------------------------------


def _last_bar(err: str) -> str:
    """The bar as it was last drawn (tqdm redraws it in place with ``\r``)."""
    return err.replace("\n", "\r").rstrip("\r").split("\r")[-1]


def test_a_corpus_run_draws_one_bar_over_files_and_sentences(vectors, corpus, tmp_path, capsys):
    summary = embed_corpus(vectors, str(corpus), str(tmp_path / "out"))
    err = capsys.readouterr().err
    # one bar for the run (a.txt 3 sentences, b.jsonl 1, c.conll 2), none per file ("sent" was their unit)
    assert re.search(r"files: 100%.*\| 3/3 .*6 sentences", _last_bar(err)), err
    assert "sent/s" not in err and "it/s" not in err
    assert summary["embedded"] == 3
    (tmp_path / "out" / "a.npz").unlink()
    embed_corpus(vectors, str(corpus), str(tmp_path / "out"))
    assert re.search(r"3/3 .*3 sentences, 2 kept", _last_bar(capsys.readouterr().err))
    embed_corpus(vectors, str(corpus), str(tmp_path / "quiet"), show_progress=False)
    assert capsys.readouterr().err == ""


def test_the_command_draws_the_bar_unless_quiet(vectors, corpus, tmp_path, capsys):
    assert main(["embed", vectors, str(corpus), str(tmp_path / "out")]) == 0
    assert re.search(r"files: 100%.*\| 3/3 .*6 sentences", _last_bar(capsys.readouterr().err))


def _interrupt_at_file(monkeypatch, number: int) -> list:
    """Make the ``number``-th file of a local corpus run raise ``KeyboardInterrupt`` (Ctrl-C)."""
    import contextembed.corpus

    calls, real = [], contextembed.corpus.embed_file

    def embed_file(*args, **kwargs):
        calls.append(args[1])
        if len(calls) == number:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(contextembed.corpus, "embed_file", embed_file)
    return calls


def test_an_interrupted_run_says_how_to_resume_and_resuming_keeps_what_is_complete(vectors, corpus, tmp_path,
                                                                                   monkeypatch, capsys):
    out = tmp_path / "out"
    _interrupt_at_file(monkeypatch, 2)
    with pytest.raises(KeyboardInterrupt):
        embed_corpus(vectors, str(corpus), str(out), show_progress=False)
    err = capsys.readouterr().err
    assert "stopped with at least 1 of 3 outputs complete; to resume, run the same command again" in err
    assert "complete outputs are checked and kept, the others embedded" in err
    monkeypatch.undo()
    stamp = os.stat(out / "a.npz").st_mtime_ns
    summary = embed_corpus(vectors, str(corpus), str(out), show_progress=False)  # as the hint says
    assert (summary["skipped"], summary["embedded"]) == (1, 2) and os.stat(out / "a.npz").st_mtime_ns == stamp


def test_an_interrupted_overwrite_says_to_resume_without_it(vectors, corpus, tmp_path, monkeypatch, capsys):
    embed_corpus(vectors, str(corpus), str(tmp_path / "out"), show_progress=False)
    _interrupt_at_file(monkeypatch, 3)
    with pytest.raises(KeyboardInterrupt):
        embed_corpus(vectors, str(corpus), str(tmp_path / "out"), overwrite=True)
    err = capsys.readouterr().err
    assert re.search(r"files:  67%.*\| 2/3 ", _last_bar(err.split("contextembed:")[0]))  # the bar where it stopped
    assert "stopped with at least 2 of 3 outputs complete; to resume, run the same command again without --overwrite" in err


def test_the_command_interrupted_prints_the_resume_hint(vectors, corpus, tmp_path, monkeypatch, capsys):
    _interrupt_at_file(monkeypatch, 1)
    assert main(["embed", vectors, str(corpus), str(tmp_path / "out"), "--quiet"]) == 130
    err = capsys.readouterr().err
    assert "stopped with at least 0 of 3 outputs complete; to resume, run the same command again" in err
    assert "interrupted by SIGINT" in err
