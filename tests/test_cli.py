import json
import os
import re
import signal
import threading

import numpy as np
import pytest

from _cli import run_cli
from contextembed import io as contextembed_io
from contextembed._runtime.files import PARTIAL_SUFFIX
from contextembed.cli import Interrupted, main, signals_interrupt
from contextembed.errors import FileFormatError
from contextembed.io import ArrayWriter, embed_file, read_conll, read_sentences
from contextembed.io import _pipeline  # where embed_file is defined, and the names it calls

TEXT = "the quick fox\n\nNew York Times unaffable\n"
OLD = b"previous output, must survive"


@pytest.fixture
def inputs(tmp_path):
    (tmp_path / "in.txt").write_text(TEXT, encoding="utf-8")
    (tmp_path / "in.conll").write_text(
        "-DOCSTART- -X- O O\n\nthe DT O O\nfox NN O O\n\nNew NNP O B-LOC\nYork NNP O I-LOC\n", encoding="utf-8"
    )
    (tmp_path / "in.jsonl").write_text(
        json.dumps({"tokens": ["the", "fox"]}) + "\n" + json.dumps({"text": "New York"}) + "\n", encoding="utf-8"
    )
    (tmp_path / "in.conllu").write_text(
        "# sent_id = 1\n# text = the fox\n1\tthe\tthe\tDET\t_\t_\t2\tdet\t_\t_\n2\tfox\tfox\tNOUN\t_\t_\t0\troot\t_\t_\n"
        "\n1-2\tNew-York\t_\t_\t_\t_\t_\t_\t_\t_\n1\tNew\tNew\tPROPN\t_\t_\t2\tcompound\t_\t_\n"
        "2\tYork\tYork\tPROPN\t_\t_\t0\troot\t_\t_\n2.1\tis\tbe\tAUX\t_\t_\t_\t_\t0:root\t_\n\n",
        encoding="utf-8",
    )
    return tmp_path


@pytest.fixture(scope="module")
def vectors(tmp_path_factory):
    """A tiny static-vectors file (fast to load) covering the test words."""
    from contextembed.encoders import write_word2vec

    words = sorted(set(" ".join([TEXT, "the fox New York a b c"]).split()))
    path = tmp_path_factory.mktemp("vectors") / "vectors.txt"
    write_word2vec(path, words, np.random.RandomState(0).randn(len(words), 4).astype(np.float32))
    return str(path)


def _embed(*args) -> list[str]:
    return ["embed", *map(str, args), "--quiet"]


def _leftovers(folder) -> list[str]:
    return sorted(name for name in os.listdir(folder) if name.endswith(PARTIAL_SUFFIX))


def _old_output(folder, name="out.npy"):
    path = folder / name
    path.write_bytes(OLD)
    return path


# -- what it writes -------------------------------------------------------------------------------


def test_info(tiny_bert_dir, capsys):
    assert main(["info", str(tiny_bert_dir)]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["n_layers"] == 3 and info["width"] == 32 and info["max_length"] == 40
    assert info["vocab_size"] > 100


@pytest.mark.parametrize("name, lengths", [("in.txt", [3, 0, 4]), ("in.conll", [2, 2]), ("in.jsonl", [2, 2]),
                                           ("in.conllu", [2, 2])])
def test_embed_word_level(tiny_bert_dir, inputs, name, lengths):
    out = inputs / "out.npz"
    assert main(["embed", str(tiny_bert_dir), str(inputs / name), str(out), "--layers=-2,-1", "--quiet"]) == 0
    archive = np.load(out)
    assert archive["lengths"].tolist() == lengths
    assert archive["features"].shape == (sum(lengths), 64)
    assert _leftovers(inputs) == []


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


@pytest.mark.parametrize("content", ["", "\n\n   \n", "-DOCSTART- -X- O O\n\n"])
@pytest.mark.parametrize("level", ["word", "text"])
def test_input_without_sentences_gives_an_empty_output(vectors, tmp_path, content, level):
    source = tmp_path / "in.conll"
    source.write_text(content, encoding="utf-8")
    npy, npz = tmp_path / "out.npy", tmp_path / "out.npz"
    assert main(_embed(vectors, source, npy, "--level", level)) == 0
    assert main(_embed(vectors, source, npz, "--level", level)) == 0
    assert np.load(npy).shape == (0, 4)
    assert np.load(npz)["features"].shape == (0, 4) and np.load(npz)["lengths"].shape == (0,)


def test_text_rows_follow_lines_and_tokens(vectors, tmp_path):
    """Word level: one row per token; text level: one row per line, blank lines included."""
    source = tmp_path / "in.txt"
    source.write_bytes(b"\xef\xbb\xbfthe fox\r\n\r\n   \na b c")  # BOM, CRLF, blank, spaces, no final newline
    assert [s for s in read_sentences(str(source))] == [["the", "fox"], [], [], ["a", "b", "c"]]
    assert main(_embed(vectors, source, tmp_path / "w.npz")) == 0
    assert np.load(tmp_path / "w.npz")["lengths"].tolist() == [2, 0, 0, 3]
    assert np.load(tmp_path / "w.npz")["features"].shape == (5, 4)
    assert main(_embed(vectors, source, tmp_path / "t.npy", "--level", "text")) == 0
    texts = np.load(tmp_path / "t.npy")
    assert texts.shape == (4, 4) and np.all(texts[1:3] == 0)


# -- never losing or clobbering data --------------------------------------------------------------


def test_existing_output_is_refused_before_the_model_loads(inputs, capsys):
    out = _old_output(inputs)
    # the model does not exist: the output is refused first, so nothing was loaded
    assert main(_embed("no-such-model", inputs / "in.txt", out)) == 2
    err = capsys.readouterr().err
    assert f"contextembed embed: error: output {out} already exists" in err and "--overwrite" in err
    assert out.read_bytes() == OLD


def test_overwrite_replaces_the_output(vectors, inputs):
    out = _old_output(inputs)
    assert main(_embed(vectors, inputs / "in.txt", out, "--overwrite")) == 0
    assert np.load(out).shape == (7, 4)
    assert _leftovers(inputs) == []


@pytest.mark.parametrize("name", ["out.npy", "out.npz"])
def test_failure_after_loading_keeps_the_previous_output(tiny_bert_dir, inputs, capsys, name):
    out = _old_output(inputs, name)
    assert main(_embed(tiny_bert_dir, inputs / "in.txt", out, "--layers", "9", "--overwrite")) == 2
    assert "out of range" in capsys.readouterr().err
    assert out.read_bytes() == OLD
    assert _leftovers(inputs) == []


def test_failure_while_writing_keeps_the_previous_output(vectors, inputs, monkeypatch):
    from contextembed.extraction import FeatureExtractor

    out = _old_output(inputs)
    words = FeatureExtractor.iter_words

    def failing(self, sentences, **kwargs):
        yield from words(self, sentences[:1], **kwargs)
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(FeatureExtractor, "iter_words", failing)
    with pytest.raises(RuntimeError, match="disk on fire"):  # unexpected: keeps its traceback
        main(_embed(vectors, inputs / "in.txt", out, "--overwrite"))
    assert out.read_bytes() == OLD
    assert sorted(os.listdir(inputs)) == ["in.conll", "in.conllu", "in.jsonl", "in.txt", "out.npy"]


def test_bad_jsonl_line_in_the_middle_keeps_the_previous_output(inputs, capsys):
    source = inputs / "bad.jsonl"
    source.write_text('{"tokens": ["a", "b"]}\n{"text": "a b"}\n{"tokens": ["a", null]}\n{"tokens": ["c"]}\n')
    out = _old_output(inputs)
    # found in the first reading, before the (missing) model is looked for
    assert main(_embed("no-such-model", source, out, "--overwrite")) == 2
    err = capsys.readouterr().err
    assert err.strip() == (f"contextembed embed: error: {source}, line 3: token 1 is null (null); every token "
                           "must be a string")
    assert out.read_bytes() == OLD


def test_output_that_is_the_input_is_refused(vectors, tmp_path, capsys):
    source = tmp_path / "data.npz"
    source.write_text("the fox\n", encoding="utf-8")
    link = tmp_path / "link.npz"
    link.symlink_to(source)
    for output in (source, link):
        assert main(_embed(vectors, source, output, "--format", "text", "--overwrite")) == 2
        assert "is the input file" in capsys.readouterr().err
    assert source.read_text() == "the fox\n"


def test_missing_output_directory_and_bad_extension(inputs, capsys):
    missing = inputs / "no" / "out.npy"
    assert main(_embed("no-such-model", inputs / "in.txt", missing)) == 2
    assert f"its directory {inputs / 'no'} does not exist" in capsys.readouterr().err
    assert main(_embed("no-such-model", inputs / "in.txt", inputs / "o.csv")) == 2
    assert "must end in .npy or .npz" in capsys.readouterr().err
    (inputs / "dir.npy").mkdir()
    assert main(_embed("no-such-model", inputs / "in.txt", inputs / "dir.npy", "--overwrite")) == 2
    assert "is a directory" in capsys.readouterr().err
    assert not missing.parent.exists() and not (inputs / "o.csv").exists()


@pytest.mark.parametrize("text, expected", [("all", "all"), ("hidden", "hidden"), ("-1", -1), ("3", 3), ("0", 0),
                                            ("-4,-3,-2,-1", [-4, -3, -2, -1]), ("2,0", [2, 0])])
def test_layers_are_ascii_ints(text, expected):
    from contextembed.cli import parse_layers

    assert parse_layers(text) == expected


@pytest.mark.parametrize("text, item", [("\u0663", "the item '\u0663'"), ("\uff11", "the item '\uff11'"),
                                        ("1_0", "the item '1_0'"), ("+2", "the item '+2'"), (" 3", "the item ' 3'"),
                                        ("3 ", "the item '3 '"), ("-1, -2", "the item ' -2'"), ("1.0", "the item '1.0'"),
                                        ("3,", "an empty item"), ("-1,,-2", "an empty item"), ("", "an empty item"),
                                        (",", "an empty item"), ("last", "the item 'last'"), ("--1", "the item '--1'")])
def test_layers_refuse_what_int_would_read_or_skip(text, item, capsys):
    """``int()`` reads '٣' (Arabic-Indic 3), '１', '1_0', '+2' and ' 3'; empty items were skipped."""
    import argparse

    from contextembed.cli import parse_layers

    with pytest.raises(argparse.ArgumentTypeError, match=f"^--layers {re.escape(repr(text))} has {re.escape(item)}; "):
        parse_layers(text)
    with pytest.raises(SystemExit) as stop:  # argparse, before anything is read
        main(["embed", "no-such-model", "in.txt", "o.npy", f"--layers={text}"])
    assert stop.value.code == 2 and f"argument --layers: --layers {text!r} has {item}" in capsys.readouterr().err


def test_embed_errors(tiny_bert_dir, inputs, capsys):
    assert main(["embed", str(tiny_bert_dir), str(inputs / "in.txt"), str(inputs / "o.npy"), "--layers", "9"]) == 2
    assert "out of range" in capsys.readouterr().err
    assert not (inputs / "o.npy").exists() and _leftovers(inputs) == []
    assert main(["embed", str(tiny_bert_dir), str(inputs / "missing.txt"), str(inputs / "o.npy")]) == 2
    assert "missing.txt' does not exist" in capsys.readouterr().err
    assert main(["embed", str(tiny_bert_dir), str(inputs), str(inputs / "o.npy"), "--format", "text"]) == 2
    assert "is a directory" in capsys.readouterr().err
    with pytest.raises(SystemExit) as stop:  # argparse: exit status 2 as well
        main(["embed", str(tiny_bert_dir), str(inputs / "in.txt"), str(inputs / "o.npy"), "--format", "csv"])
    assert stop.value.code == 2 and "invalid choice: 'csv'" in capsys.readouterr().err
    assert main(["info", "no-such-model"]) == 2
    assert "never downloads" in capsys.readouterr().err


def test_input_that_changes_between_the_two_readings_writes_nothing(vectors, inputs, monkeypatch):
    out = _old_output(inputs)
    readings = iter([[["a", "b"], ["c"]], [["a", "b"]]])
    monkeypatch.setattr(_pipeline, "read_sentences", lambda *args: iter(next(readings)))
    with pytest.raises(ValueError, match="changed while it was being read"):
        embed_file(vectors, str(inputs / "in.txt"), str(out), overwrite=True, show_progress=False)
    assert out.read_bytes() == OLD and _leftovers(inputs) == []


@pytest.mark.parametrize("name", ["out.npy", "out.npz"])
def test_array_writer_missing_rows_leave_no_output(tmp_path, name):
    out = _old_output(tmp_path, name)
    with pytest.raises(RuntimeError, match="wrote 2 rows, expected 3"):
        with ArrayWriter(str(out), 3, 2, overwrite=True) as writer:
            writer.write(np.ones((2, 2)))
    assert out.read_bytes() == OLD and _leftovers(tmp_path) == []
    with pytest.raises(FileExistsError, match="--overwrite"):
        with ArrayWriter(str(out), 3, 2):
            pytest.fail("must not start")
    assert not hasattr(ArrayWriter, "abort")


@pytest.mark.parametrize("dtype, value, message", [
    ("float16", 1e5, r"row 1 of .*out\.npy exceeds the float16 range \(largest magnitude 1e\+05\); write float32"),
    ("float32", np.nan, r"row 1 of .*out\.npy holds NaN or infinite values"),
])
def test_array_writer_refuses_values_it_cannot_store(tmp_path, dtype, value, message):
    with pytest.raises(ValueError, match=message):
        with ArrayWriter(str(tmp_path / "out.npy"), 2, 2, dtype) as writer:
            writer.write(np.array([[1.0, 2.0], [3.0, value]]))
    assert os.listdir(tmp_path) == []


def test_array_writer_writes_atomically(tmp_path):
    out = tmp_path / "out.npz"
    with ArrayWriter(str(out), 3, 2) as writer:
        writer.write(np.ones((1, 2)))
        writer.write(np.zeros((2, 2)))
        assert os.listdir(tmp_path) != ["out.npz"] and not out.exists()
        writer.close(lengths=np.array([1, 2]))
    archive = np.load(out)
    assert archive["features"].tolist() == [[1, 1], [0, 0], [0, 0]] and archive["lengths"].tolist() == [1, 2]
    assert os.listdir(tmp_path) == ["out.npz"]


# -- strict readers -------------------------------------------------------------------------------

BAD_JSONL = [
    ('{"tokens": ["a", null]}', r"line 2: token 1 is null \(null\)"),
    ('{"tokens": [3, "a"]}', r"line 2: token 0 is a number \(3\)"),
    ('{"tokens": ["a", "b", true]}', r"line 2: token 2 is a boolean \(true\)"),
    ('{"tokens": ["a", ["b"]]}', r'line 2: token 1 is an array \(\["b"\]\)'),
    ('{"tokens": ["ok", "\\ud800"]}', r"line 2: token 1 holds a .*lone surrogate"),
    ('{"text": "a \\udfff"}', r'line 2: "text" holds a .*lone surrogate'),
    ('{"tokens": "a b"}', r'line 2: "tokens" is a string; expected a list of strings'),
    ('{"text": ["a"]}', r'line 2: "text" is an array'),
    ('{"text": "a", "tokens": ["a"]}', r"line 2: expected an object .* got an object with both"),
    ('{"words": ["a"]}', r"line 2: expected an object .* got an object with neither"),
    ('["a", "b"]', r"line 2: expected an object .* got an array"),
    ('"a b"', r"line 2: expected an object .* got a string"),
    ('{"tokens": ["a"]', r"line 2: not valid JSON \(.* at column 17\)"),
    ('{"tokens": ["a"], "tokens": [1]}', r"line 2: key 'tokens' is given twice"),
    ('{"tokens": ["a"], "doc": ' + "[" * 1500 + "]" * 1500 + "}", r"line 2: nested 1501 levels deep; at most 64"),
    ('{"tokens": ["a"], "doc": NaN}', r"line 2: holds NaN, which is not a JSON number"),
]


@pytest.mark.parametrize("line, message", BAD_JSONL)
def test_jsonl_errors_name_the_line_and_token(tmp_path, line, message):
    source = tmp_path / "in.jsonl"
    source.write_text('{"tokens": ["fine"]}\n' + line + "\n", encoding="utf-8")
    with pytest.raises(FileFormatError, match=f"^{source}, {message}") as error:
        list(read_sentences(str(source)))
    assert error.value.path == str(source) and error.value.line == 2


def test_jsonl_accepts_good_records(tmp_path):
    source = tmp_path / "in.jsonl"
    records = [{"tokens": ["é", "", " x"], "id": 3}, {"text": "a  b"}, {"tokens": ["\\ud83d\\ude00", "\ud83d\ude00"]}]
    source.write_text("\n".join(json.dumps(r) for r in records) + "\n\n", encoding="utf-8")
    assert list(read_sentences(str(source))) == [["é", "", " x"], ["a", "b"], ["\\ud83d\\ude00", "😀"]]


@pytest.mark.parametrize("content, message", [
    (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", r"line 1: not UTF-8 text: byte 0x89 at byte 1 of the line"),
    (b"GIF89a\n\x01\x00\x00\n", r"line 2: NUL byte at byte 2 of the line: this is not a text file"),
    (b"the fox\ncaf\xe9 au lait\n", r"line 2: not UTF-8 text: byte 0xe9 at byte 4 of the line"),
    ("the fox\n".encode("utf-16"), r"line 1: NUL byte at byte 4 of the line: .* UTF-16 text\?"),
])
@pytest.mark.parametrize("name", ["in.txt", "in.conll", "in.conllu", "in.jsonl"])
def test_binary_or_non_utf8_input_names_the_file_and_line(tmp_path, name, content, message):
    source = tmp_path / name
    source.write_bytes(content)
    with pytest.raises(FileFormatError, match=f"^{source}, {message}"):
        list(read_sentences(str(source)))


def test_binary_input_through_the_cli(vectors, tmp_path, capsys):
    source = tmp_path / "in.txt"
    source.write_bytes(bytes(range(256)) * 4)
    assert main(_embed(vectors, source, tmp_path / "out.npy")) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"contextembed embed: error: {source}, line 1: NUL byte") and "Traceback" not in err
    assert os.listdir(tmp_path) == ["in.txt"]


def test_conll_boundaries(tmp_path):
    source = tmp_path / "in.conll"
    source.write_text(
        "-DOCSTART- -X- O O\n\nEU NNP B-ORG\nrejects VBZ O\n \t \nGerman JJ B-MISC\n-DOCSTART- -X- O O\n"
        "10\u00a0000 CD O\nLondon NNP B-LOC\n\n\n\n", encoding="utf-8",
    )
    assert list(read_conll(str(source))) == [
        (["EU", "rejects"], [["NNP", "B-ORG"], ["VBZ", "O"]]),  # a white-space line ends the sentence
        (["German"], [["JJ", "B-MISC"]]),  # and so does -DOCSTART-
        (["10\u00a0000", "London"], [["CD", "O"], ["NNP", "B-LOC"]]),  # a no-break space is no separator
    ]


def test_conllu_errors(tmp_path):
    source = tmp_path / "in.conllu"
    source.write_text("1\tthe\tthe\tDET\t_\t_\t2\tdet\t_\t_\n2 fox fox NOUN _ _ 0 root _ _\n", encoding="utf-8")
    with pytest.raises(FileFormatError, match=r"line 2: expected 10 tab-separated CoNLL-U columns .* got 1"):
        list(read_sentences(str(source)))
    source.write_text("x\tthe\tthe\tDET\t_\t_\t2\tdet\t_\t_\n", encoding="utf-8")
    with pytest.raises(FileFormatError, match=r"line 1: ID 'x' is not a word number"):
        list(read_sentences(str(source)))


def test_reader_argument_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"input file '.*in\.csv' does not exist"):  # before its format
        read_sentences(str(tmp_path / "in.csv"))
    (tmp_path / "in.csv").write_text("a,b\n", encoding="utf-8")
    with pytest.raises(ValueError, match="cannot tell the format"):
        read_sentences(str(tmp_path / "in.csv"))
    with pytest.raises(ValueError, match="input format 'csv' is not one of text, conll, conllu, jsonl"):
        read_sentences(str(tmp_path / "in.txt"), "csv")
    with pytest.raises(FileNotFoundError, match="does not exist"):
        read_sentences(str(tmp_path / "in.txt"))


# -- exit statuses and signals ------------------------------------------------------------------


def test_unexpected_errors_keep_their_traceback(inputs, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("a bug")

    monkeypatch.setattr(_pipeline, "embed_file", broken)
    with pytest.raises(RuntimeError, match="a bug"):
        main(_embed("any", inputs / "in.txt", inputs / "out.npy"))


def test_signals_interrupt_raises_and_restores_handlers():
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    for signum in (signal.SIGINT, signal.SIGTERM):
        with pytest.raises(Interrupted) as stop:
            with signals_interrupt():
                os.kill(os.getpid(), signum)
                for _ in range(100):  # the handler runs between bytecodes
                    pass
                pytest.fail("the signal did not interrupt the block")
        assert stop.value.signum == signum and isinstance(stop.value, KeyboardInterrupt)
    assert {s: signal.getsignal(s) for s in before} == before


def test_signals_interrupt_ignores_repeats_and_defers_when_done():
    cleaned = []
    with pytest.raises(Interrupted):
        with signals_interrupt():
            try:
                os.kill(os.getpid(), signal.SIGTERM)
                for _ in range(100):
                    pass
            finally:  # clean-up while unwinding is not cut short by a second signal
                os.kill(os.getpid(), signal.SIGINT)
                for _ in range(100):
                    pass
                cleaned.append(True)
    assert cleaned == [True]
    with signals_interrupt(done=lambda: True) as deferred:
        os.kill(os.getpid(), signal.SIGINT)
        for _ in range(100):
            pass
    assert deferred == [signal.SIGINT]


def test_signals_interrupt_leaves_ignored_signals_and_other_threads_alone():
    previous = signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        with signals_interrupt():
            assert signal.getsignal(signal.SIGTERM) == signal.SIG_IGN
            assert signal.getsignal(signal.SIGINT) not in (signal.SIG_IGN, signal.default_int_handler)
    finally:
        signal.signal(signal.SIGTERM, previous)
    seen = []

    def worker():
        with signals_interrupt():
            seen.append(signal.getsignal(signal.SIGTERM))

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join()
    assert seen == [signal.getsignal(signal.SIGTERM)]


@pytest.mark.parametrize("signum, status", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_signal_while_writing_keeps_the_previous_output(vectors, inputs, monkeypatch, capsys, signum, status):
    from contextembed.extraction import FeatureExtractor

    out = _old_output(inputs)
    words = FeatureExtractor.iter_words

    def interrupted(self, sentences, **kwargs):
        assert _leftovers(inputs)  # the temporary is being written
        yield from words(self, sentences[:1], **kwargs)
        os.kill(os.getpid(), signum)
        for _ in range(100):
            pass

    monkeypatch.setattr(FeatureExtractor, "iter_words", interrupted)
    before = signal.getsignal(signal.SIGTERM)
    assert main(_embed(vectors, inputs / "in.txt", out, "--overwrite")) == status
    name = signal.Signals(signum).name
    assert capsys.readouterr().err == (f"contextembed embed: interrupted by {name}; {out} was not written; the "
                                       "previous file is unchanged\n")
    assert out.read_bytes() == OLD and _leftovers(inputs) == []
    assert signal.getsignal(signal.SIGTERM) == before


def test_signal_after_the_output_is_in_place_is_reported_not_raised(vectors, inputs, monkeypatch, capsys):
    real = _pipeline.embed_file

    def then_signal(*args, **kwargs):
        summary = real(*args, **kwargs)
        os.kill(os.getpid(), signal.SIGTERM)
        for _ in range(100):
            pass
        return summary

    monkeypatch.setattr(_pipeline, "embed_file", then_signal)
    out = inputs / "out.npy"
    assert main(_embed(vectors, inputs / "in.txt", out)) == 0
    assert "SIGTERM arrived after" in capsys.readouterr().err
    assert np.load(out).shape == (7, 4)


@pytest.mark.slow
def test_console_module_runs(tiny_bert_dir, inputs):
    result = run_cli(["info", tiny_bert_dir])
    assert result.returncode == 0 and '"n_layers": 3' in result.stdout
    result = run_cli(_embed(tiny_bert_dir, inputs / "in.jsonl", inputs / "in.jsonl", "--overwrite"))
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.strip().endswith("is the input file; choose another output path")


def test_help_is_one_line_and_two_examples(capsys):
    from contextembed.cli import DESCRIPTION, build_parser

    text = build_parser().format_help()
    assert DESCRIPTION in text and "``" not in text and ":func:" not in text  # no RST markup
    examples = [line for line in text.splitlines() if line.strip().startswith("contextembed ")]
    assert len(examples) == 2 and "contextembed embed minilm-l6" in examples[0]


# -- the default text vector ----------------------------------------------------------------------

LINES = ["EU rejects German call to boycott British lamb.", "", "Peter Blackburn, U.S.-based: don't!", "a b c"]


@pytest.fixture
def lines(tmp_path):
    path = tmp_path / "lines.txt"
    path.write_text("\n".join(LINES) + "\n", encoding="utf-8")
    return path


def test_text_level_default_is_text_embedders_vector(tiny_bert_dir, lines, tmp_path, capsys):
    """`embed --level text` with no option is TextEmbedder()'s vector of the same raw lines (to float32
    rounding: the CLI mixes the layers of each piece before averaging, TextEmbedder averages each layer
    first)."""
    from contextembed.sklearn import TextEmbedder

    out = tmp_path / "texts.npy"
    assert main(_embed(tiny_bert_dir, lines, out, "--level", "text", "--precision", "fp32", "--device", "cpu")) == 0
    expected = TextEmbedder(str(tiny_bert_dir), precision="fp32", device="cpu").fit_transform(LINES)
    np.testing.assert_allclose(np.load(out), expected, rtol=1e-5, atol=1e-7)
    record = json.loads((tmp_path / "texts.npy.provenance.json").read_text())
    assert {name: record[name] for name in ("tokenizer", "layers", "combine", "subword_pooling", "text_pooling",
                                            "normalize")} == {
        "tokenizer": "auto", "layers": [0, 1, 2], "combine": "scalar_mix", "subword_pooling": "mean",
        "text_pooling": "piece_mean", "normalize": True}
    assert json.loads(capsys.readouterr().out) == {"sentences": 4, "rows": 4, "dim": 32, "output": str(out),
                                                   "backend": "torch", "precision": "fp32"}


def test_piece_mean_needs_no_other_flag_and_normalize_can_be_turned_off(tiny_bert_dir, lines, tmp_path):
    from contextembed import load_encoder
    from contextembed.extraction import FeatureExtractor
    from contextembed.tokenizers import regex_tokenize

    out = tmp_path / "plain.npy"
    assert main(_embed(tiny_bert_dir, lines, out, "--level", "text", "--text-pooling", "piece_mean", "--layers=-1",
                       "--no-normalize", "--precision", "fp32")) == 0
    extractor = FeatureExtractor(load_encoder(str(tiny_bert_dir), precision="fp32"), layers=-1, normalize=False,
                                 level="text")
    np.testing.assert_array_equal(np.load(out), extractor.texts([regex_tokenize(line) for line in LINES]))
    assert np.linalg.norm(np.load(out)[0]) != pytest.approx(1.0)


@pytest.mark.parametrize("flag", [["--normalize"], ["--no-normalize"], ["--text-pooling", "max"]])
def test_text_options_at_word_level_are_refused(vectors, inputs, capsys, flag):
    assert main(_embed(vectors, inputs / "in.txt", inputs / "o.npz", *flag)) == 2
    err = capsys.readouterr().err
    assert f"({flag[0].replace('no-', '')}) shapes text vectors: pass level='text' (--level text)" in err
    assert not (inputs / "o.npz").exists()


def test_word_level_keeps_its_defaults(vectors, lines, tmp_path):
    """Word level still splits lines on white space and records no normalize."""
    assert main(_embed(vectors, lines, tmp_path / "w.npz")) == 0
    assert np.load(tmp_path / "w.npz")["lengths"].tolist() == [len(line.split()) for line in LINES]
    record = contextembed_io.read_output_record(str(tmp_path / "w.npz"))
    assert record["tokenizer"] == "whitespace" and record["text_pooling"] is None and "normalize" not in record


def test_an_output_of_other_text_options_is_not_reused(vectors, lines, tmp_path):
    """normalize is part of a text output's record: one made without it is refused, naming it."""
    from contextembed import load_encoder
    from contextembed.errors import ProvenanceError
    from contextembed.io import check_reusable, expected_record

    out = str(tmp_path / "t.npz")
    embed_file(vectors, str(lines), out, level="text", normalize=False, show_progress=False)
    encoder = load_encoder(vectors)
    check_reusable(out, expected_record(vectors, str(lines), out, encoder=encoder, level="text", normalize=False),
                   input_path=str(lines))
    with pytest.raises(ProvenanceError, match="made with normalize=false, but this run has normalize=true") as raised:
        check_reusable(out, expected_record(vectors, str(lines), out, encoder=encoder, level="text"),
                       input_path=str(lines))
    assert raised.value.field == "normalize"


# -- --backend --------------------------------------------------------------------------------------


@pytest.fixture
def engine_cache():
    """The session's engine cache (``tests/conftest.py``); skipped without OpenVINO."""
    pytest.importorskip("openvino", reason='--backend openvino needs pip install ".[openvino]"')


def test_info_says_what_runs(tiny_bert_dir, engine_cache, capsys):
    assert main(["info", str(tiny_bert_dir), "--device", "cpu", "--precision", "fp32"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert (info["backend"], info["precision"]) == ("torch", "fp32")
    assert main(["info", str(tiny_bert_dir), "--device", "cpu", "--precision", "fp32", "--backend", "openvino"]) == 0
    assert json.loads(capsys.readouterr().out)["backend"] == "openvino"


def test_a_backend_the_encoder_cannot_use_is_refused(vectors, inputs, capsys):
    assert main(["info", vectors, "--backend", "openvino"]) == 2
    assert "backend='openvino' does not apply to static encoders" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["info", vectors, "--backend", "onnx"])
    assert "invalid choice: 'onnx'" in capsys.readouterr().err


def test_embed_on_the_engine_records_the_backend_and_a_resume_on_another_is_refused(tiny_bert_dir, inputs,
                                                                                     engine_cache, capsys):
    corpus, out = inputs / "corpus", inputs / "out"
    corpus.mkdir()
    (inputs / "in.txt").rename(corpus / "a.txt")
    common = ["--device", "cpu", "--precision", "fp32"]
    assert main(_embed(tiny_bert_dir, corpus, out, *common, "--backend", "openvino")) == 0
    summary = json.loads(capsys.readouterr().out)
    assert (summary["backend"], summary["precision"], summary["embedded"]) == ("openvino", "fp32", 1)
    assert contextembed_io.read_output_record(str(out / "a.npz"))["backend"] == "openvino"
    assert main(_embed(tiny_bert_dir, corpus, out, *common, "--backend", "openvino")) == 0  # resumed: kept
    assert json.loads(capsys.readouterr().out)["skipped"] == 1
    assert main(_embed(tiny_bert_dir, corpus, out, *common)) == 2  # torch now
    assert "was made with backend='openvino', but this run has backend='torch'" in capsys.readouterr().err


def test_embed_with_backend_auto_shows_what_auto_chose(tiny_bert_dir, inputs, engine_cache, capsys):
    out = inputs / "auto.npz"
    assert main(_embed(tiny_bert_dir, inputs / "in.txt", out, "--device", "cpu", "--precision", "fp32",
                       "--backend", "auto")) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["backend"] in ("torch", "openvino") and summary["precision"] == "fp32"
    assert contextembed_io.read_output_record(str(out))["backend"] == summary["backend"]


# -- the command line itself ----------------------------------------------------------------------


def test_version(capsys):
    from contextembed import __version__

    with pytest.raises(SystemExit) as stop:
        main(["--version"])
    assert stop.value.code == 0 and capsys.readouterr().out == f"contextembed {__version__}\n"


def _parsers(parser, name="contextembed"):
    """``(command name, parser)`` of the parser and of every sub-command, depth first."""
    import argparse

    yield name, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub, child in action.choices.items():
                yield from _parsers(child, f"{name} {sub}")


def test_every_help_shows_the_defaults():
    """Each option that has a default says it in --help, in every command."""
    import argparse

    from contextembed.cli import build_parser

    checked = 0
    for name, parser in _parsers(build_parser()):
        for action in parser._actions:
            if not action.option_strings or any(action.default is no for no in (None, False, argparse.SUPPRESS)):
                continue
            entry = " ".join(parser._get_formatter()._format_action(action).split())  # as --help prints it
            assert "default" in entry, f"{name} --help: {entry}"
            checked += 1
    assert checked > 40
    embed = " ".join(next(p for n, p in _parsers(build_parser()) if n == "contextembed embed").format_help().split())
    for said in ("--dtype {float32,float16} output dtype (float16 halves the file) (default: float32)",
                 "(default at word level: whitespace; at text level: auto)",
                 "(default at word level: first; at text level: mean)", "(default: on)"):
        assert said in embed


def test_embed_help_gives_the_ray_install_line_and_pretrain_static_offers_no_resume():
    from contextembed.cli import build_parser

    helps = {name: parser.format_help() for name, parser in _parsers(build_parser())}
    assert 'pip install ".[ray]"' in helps["contextembed embed"] and "contextembed[ray]" not in helps["contextembed embed"]
    assert "--resume" not in helps["contextembed pretrain static"]
    for resumable in ("mlm", "bilm"):
        assert "--resume" in helps[f"contextembed pretrain {resumable}"]


@pytest.mark.slow
def test_info_into_a_closed_pipe_ends_quietly(vectors):
    """`contextembed info ... | head -1`: the reader closes the pipe before the output is written."""
    from _cli import check_no_sockets, start_cli

    process = start_cli(["info", vectors])
    process.stdout.close()  # before the model loads: the JSON meets a closed pipe
    err = process.stderr.read()
    process.wait(timeout=120)
    check_no_sockets(process)
    assert "BrokenPipe" not in err and "Traceback" not in err and "Exception ignored" not in err
    assert process.returncode == 141  # 128 + SIGPIPE, as a shell reports it


def test_missing_paths_say_they_do_not_exist(vectors, inputs, capsys):
    assert main(_embed(vectors, inputs / "sample.text", inputs / "o.npz")) == 2
    err = capsys.readouterr().err
    assert "sample.text' does not exist" in err and "--format" not in err
    assert main(["info", str(inputs / "no-such-model")]) == 2
    err = capsys.readouterr().err
    assert "no-such-model' does not exist" in err and "hf download" not in err


def test_summaries_are_one_json_line_on_stdout(vectors, tiny_bert_dir, inputs, tmp_path, capsys):
    assert main(_embed(vectors, inputs / "in.txt", tmp_path / "w.npz")) == 0
    out = capsys.readouterr().out
    assert json.loads(out) == {"sentences": 3, "rows": 7, "dim": 4, "output": str(tmp_path / "w.npz"),
                               "backend": "numpy", "precision": None}  # static vectors: a table looked up
    assert main(["distill", str(tiny_bert_dir), str(tmp_path / "student"), "--corpus", str(inputs / "in.txt"),
                 "--dim", "4", "--quiet"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["output"] == str(tmp_path / "student") and summary["dim"] == 4 and summary["words"] > 0


@pytest.mark.parametrize("context", [0, 4])
def test_the_embed_bar_starts_at_zero_moves_per_batch_and_prints_its_last_line_once(tiny_bert_dir, tmp_path, capsys,
                                                                                   monkeypatch, context):
    """Issue 38 item 12: the final 100% line came twice, and the first count only after a whole chunk."""
    import time

    from contextembed.encoders import transformer
    from contextembed.encoders.transformer import _paths

    run_batch, batches = transformer.TransformerEncoder._run_batch, _paths.batches
    monkeypatch.setattr(transformer.TransformerEncoder, "_run_batch",  # slow enough for tqdm (0.1 s between draws)
                        lambda self, *a, **k: (time.sleep(0.12), run_batch(self, *a, **k))[1])
    monkeypatch.setattr(_paths, "batches", lambda rows, length, tokens, size: batches(rows, length, tokens, 3))
    source = tmp_path / "in.txt"
    source.write_text("".join(f"the quick fox number {i} jumps\n" for i in range(12)), encoding="utf-8")
    args = ["embed", str(tiny_bert_dir), str(source), str(tmp_path / "out.npz"), "--device", "cpu",
            "--precision", "fp32"]
    assert main(args + (["--context", str(context)] if context else [])) == 0
    states = [state for state in capsys.readouterr().err.split("\r") if "/12" in state]
    assert "0/12" in states[0]
    assert sum("12/12" in state for state in states) == 1 and states[-1].rstrip().endswith("]")
    assert any(f"{k}/12" in state for state in states for k in range(1, 12))  # counted before the end
