"""Which files a corpus run takes, and where their outputs go: one rule for directories and globs.

A directory and a glob are searched by one walker (:mod:`contextembed.corpus`): links to files and
directories are followed, each real directory once (a loop ends), each real file is one input under
its name with the fewest links, other names are left out with a warning, a dangling link named as an
input is an error. Outputs stay inside OUT: a glob cannot reach outside its root through ``..``.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from contextembed.corpus import embed_corpus, find_inputs, plan

pytestmark = pytest.mark.skipif(not hasattr(os, "symlink") or os.name == "nt", reason="POSIX symbolic links")

WORDS = "the quick brown fox jumps over lazy dog".split()


@pytest.fixture(scope="module")
def vectors(tmp_path_factory) -> str:
    from contextembed.encoders import write_word2vec

    path = tmp_path_factory.mktemp("vectors") / "v.txt"
    write_word2vec(path, WORDS, np.random.default_rng(0).normal(size=(len(WORDS), 4)).astype(np.float32))
    return str(path)


@pytest.fixture
def tree(tmp_path):
    """data/a.txt, data/sub/b.txt, a loop (sub/loop -> ..), a linked directory (linked -> sub), a
    linked file (alias.txt -> a.txt), a directory outside linked in (ext -> ../outside) and a hidden one."""
    data, outside = tmp_path / "data", tmp_path / "outside"
    (data / "sub").mkdir(parents=True)
    outside.mkdir()
    (data / "a.txt").write_text("the quick fox\n", encoding="utf-8")
    (data / "sub" / "b.txt").write_text("lazy dog\n", encoding="utf-8")
    (outside / "c.txt").write_text("over the dog\n", encoding="utf-8")
    (data / ".cache").mkdir()
    (data / ".cache" / "h.txt").write_text("the\n", encoding="utf-8")
    os.symlink("..", data / "sub" / "loop")
    os.symlink("sub", data / "linked")
    os.symlink("a.txt", data / "alias.txt")
    os.symlink(os.path.join("..", "outside"), data / "ext")
    return data


def _relative(paths, root) -> list[str]:
    return [os.path.relpath(path, root) for path in paths]


@pytest.mark.parametrize("mode", ["directory", "glob"])
def test_both_modes_take_each_real_file_once_under_its_plainest_name(tree, mode):
    pattern = str(tree) if mode == "directory" else str(tree / "**" / "*.txt")
    with pytest.warns(UserWarning, match=r"3 path\(s\) below .* are other names \(through links\).*alias\.txt.*"
                      r"linked.*loop"):
        root, inputs = find_inputs(pattern)
    assert root == str(tree)
    assert _relative(inputs, tree) == ["a.txt", os.path.join("ext", "c.txt"), os.path.join("sub", "b.txt")]


def test_the_symlink_loop_gives_one_output_per_input_in_both_modes(tree, vectors, tmp_path):
    outputs = {}
    for mode, pattern in (("dir", str(tree)), ("glob", str(tree / "**" / "*.txt"))):
        with pytest.warns(UserWarning, match="other names"):
            summary = embed_corpus(vectors, pattern, str(tmp_path / mode), show_progress=False)
        outputs[mode] = _relative(summary["outputs"], tmp_path / mode)
        written = sorted(os.path.relpath(os.path.join(folder, name), tmp_path / mode)
                         for folder, _, names in os.walk(tmp_path / mode) for name in names)
        assert written == sorted(outputs[mode])  # nothing but the outputs: no sub/loop/sub/loop/...
    assert outputs["dir"] == outputs["glob"] == ["a.npz", os.path.join("ext", "c.npz"), os.path.join("sub", "b.npz")]


def test_a_glob_through_the_linked_directory_names_its_files_by_it(tree):
    root, inputs = find_inputs(str(tree / "linked" / "*.txt"))
    assert root == str(tree / "linked") and _relative(inputs, root) == ["b.txt"]


def test_a_dangling_link_named_as_an_input_is_an_error_in_both_modes(tree):
    os.symlink("gone.txt", tree / "sub" / "dangling.txt")
    for pattern in (str(tree), str(tree / "**" / "*.txt"), str(tree / "sub" / "d*")):
        with pytest.raises(FileNotFoundError, match=r"input .*dangling\.txt is a link to 'gone\.txt', which does not "
                           r"exist .*remove the link or restore its target"):
            find_inputs(pattern)
    os.symlink("gone", tree / "sub" / "dangling_dir")  # not an input name in directory mode, not matched: ignored
    (tree / "sub" / "dangling.txt").unlink()
    with pytest.warns(UserWarning):
        assert len(find_inputs(str(tree))[1]) == 3


def test_hidden_names_need_a_pattern_part_that_starts_with_a_dot(tree):
    with pytest.warns(UserWarning):
        _, inputs = find_inputs(str(tree / "**" / "*.txt"))
    assert not any(".cache" in path for path in inputs)
    root, inputs = find_inputs(str(tree / ".*" / "*.txt"))
    assert _relative(inputs, root) == [os.path.join(".cache", "h.txt")]


def test_a_glob_cannot_lead_outside_its_root(tree, tmp_path):
    for pattern in (tree / "*" / ".." / "*.txt", tree / "**" / ".." / ".." / "*.txt", tree / "sub" / "*" / ".."):
        with pytest.raises(ValueError, match=r"holds '\.\.' after its first wildcard.*put every '\.\.' before"):
            plan(str(pattern), str(tmp_path / "out"))
    assert not (tmp_path / "out").exists()


def test_dotdot_before_the_first_wildcard_is_fine_and_outputs_stay_in_out(tree, tmp_path):
    jobs = plan(str(tree / "sub" / ".." / ".." / "outside" / "*.txt"), str(tmp_path / "out"))
    assert [os.path.relpath(job.output, tmp_path / "out") for job in jobs] == ["c.npz"]
    with pytest.warns(UserWarning):
        jobs = plan(os.path.join(os.path.relpath(tree, os.getcwd()), "**", "*.txt"), str(tmp_path / "out"))
    for job in jobs:
        real_out = os.path.realpath(tmp_path / "out")
        assert os.path.commonpath([os.path.realpath(job.output), real_out]) == real_out


def test_outputs_and_records_in_the_input_tree_are_never_inputs(vectors, tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    (data / "a.txt").write_text("the fox\n", encoding="utf-8")
    out = data / "features"
    for _ in range(2):  # the second run must not take features/a.npy.provenance.json for a JSON-lines input
        summary = embed_corpus(vectors, str(data), str(out), output_format="npy", show_progress=False)
        assert summary["files"] == 1
    assert summary["skipped"] == 1
    beside = embed_corpus(vectors, str(data), str(data), output_format="npy", show_progress=False)  # OUT = DIR
    assert beside["files"] == 1 and sorted(os.listdir(data)) == ["a.npy", "a.npy.provenance.json", "a.txt",
                                                                 "features"]
    assert embed_corpus(vectors, str(data), str(data), output_format="npy", show_progress=False)["skipped"] == 1


def test_the_cli_says_what_is_missing(vectors, tmp_path, capsys):
    from contextembed.cli import main

    out = str(tmp_path / "out")
    cases = [
        (str(tmp_path / "corpusx") + "/", "input file '{}' does not exist"),
        (str(tmp_path / "sample.text"), "input file '{}' does not exist"),
        (str(tmp_path / "corpusx" / "*.txt"), "glob '{}': its directory '%s' does not exist" % (tmp_path / "corpusx")),
        (str(tmp_path / "*.conllu"), "no input files match the glob '{}'"),
    ]
    for given, message in cases:
        assert main(["embed", vectors, given, out + (".npz" if "*" not in given else ""), "--quiet"]) == 2
        err = capsys.readouterr().err
        assert message.format(given) in err and "cannot tell the format" not in err, err
