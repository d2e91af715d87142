"""Several batches at once on a CPU (:mod:`contextembed._runtime.streams`): every item runs once, errors come
back, thread counts are set per stream and given back, features do not change, forks do not hang,
calls from ``atexit`` handlers run in the caller's thread, a pool that cannot start leaves no thread
behind."""

from __future__ import annotations

import concurrent.futures
import re
import threading
import time
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

from _scenario import run_scenario
from contextembed import load_encoder
from contextembed._runtime import streams
from contextembed.encoders._base import LongPairWarning
from contextembed.errors import SettingError
from contextembed._runtime.streams import STREAMS_ENV, StreamsCappedWarning, cpu_streams, max_streams, run_all

SCENARIO = Path(__file__).with_name("streams_fork_scenario.py")


@pytest.fixture
def two_threads():
    previous = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(previous)


def test_default_is_a_stream_per_thread(two_threads, monkeypatch):
    monkeypatch.delenv(STREAMS_ENV, raising=False)
    assert cpu_streams() == (2, 1)


@pytest.mark.parametrize("setting, expected", [("1", (1, 2)), ("2", (2, 1)), ("3", (3, 1)), (" 2 ", (2, 1)), ("", (2, 1))])
def test_streams_from_the_environment(two_threads, monkeypatch, setting, expected):
    monkeypatch.setenv(STREAMS_ENV, setting)
    assert cpu_streams() == expected


@pytest.mark.parametrize("setting", ["0", "-1", "two", "1.5", "1e20", "²", "٣", "８", "+2", "2 streams"])
def test_bad_stream_count_names_the_variable(monkeypatch, setting):
    monkeypatch.setenv(STREAMS_ENV, setting)
    with pytest.raises(SettingError, match=re.escape(f"{STREAMS_ENV}={setting!r}: expected a positive whole number written in ASCII")):
        cpu_streams()


@pytest.mark.parametrize("setting", ["100000", "99999999999"])
def test_a_stream_count_beyond_the_cores_is_capped_with_a_warning(two_threads, monkeypatch, setting):
    monkeypatch.setenv(STREAMS_ENV, setting)
    with pytest.warns(StreamsCappedWarning, match=f"{STREAMS_ENV}={setting} asks for more streams"):
        assert cpu_streams() == (max_streams(), 1)
    monkeypatch.setenv(STREAMS_ENV, str(max_streams()))
    with warnings.catch_warnings():
        warnings.simplefilter("error", StreamsCappedWarning)  # the cap itself is no warning
        assert cpu_streams() == (max_streams(), 1)


def test_a_pool_that_cannot_start_leaves_no_thread_waiting(monkeypatch):
    """The OS refusing the third thread used to leave the first two waiting for it forever, and the
    process could not exit (it joins the pools' threads)."""
    original = concurrent.futures.ThreadPoolExecutor._adjust_thread_count

    def refuse_the_third(pool):
        if len(pool._threads) == 2:
            raise RuntimeError("can't start new thread")
        original(pool)

    monkeypatch.setattr(concurrent.futures.ThreadPoolExecutor, "_adjust_thread_count", refuse_the_third)
    before = set(threading.enumerate())
    with pytest.raises(RuntimeError, match="can't start new thread"):
        streams._start_pool(5, 1)
    started = [thread for thread in threading.enumerate() if thread not in before]
    assert started, "two workers started before the refusal"
    for thread in started:
        thread.join(timeout=10)
    assert not [thread.name for thread in started if thread.is_alive()], "workers still wait for the others"


def _record(seen: list, lock: threading.Lock):
    def function(item):
        time.sleep(0.01)  # long enough that both streams take items
        with lock:
            seen.append((item, threading.current_thread().name, torch.get_num_threads()))
    return function


def test_every_item_runs_once_on_single_threaded_streams(two_threads, monkeypatch):
    monkeypatch.delenv(STREAMS_ENV, raising=False)
    seen, lock = [], threading.Lock()
    run_all(_record(seen, lock), list(range(20)))
    assert sorted(item for item, _, _ in seen) == list(range(20))
    assert {name.startswith("contextembed-stream") for _, name, _ in seen} == {True}
    assert len({name for _, name, _ in seen}) == 2, "both streams took items"
    assert {threads for _, _, threads in seen} == {1}
    assert torch.get_num_threads() == 2, "the caller's thread count is its own"
    # threads started later (by anyone) get the caller's count, not the streams' one
    later = []
    thread = threading.Thread(target=lambda: later.append(torch.get_num_threads()))
    thread.start()
    thread.join()
    assert later == [2]


def test_one_stream_runs_on_the_caller(two_threads, monkeypatch):
    seen, lock = [], threading.Lock()
    monkeypatch.setenv(STREAMS_ENV, "1")
    run_all(_record(seen, lock), [0, 1, 2])
    assert [item for item, _, _ in seen] == [0, 1, 2]
    assert {name for _, name, _ in seen} == {threading.current_thread().name}
    assert {threads for _, _, threads in seen} == {2}


def test_a_single_item_runs_on_a_stream_too(two_threads, monkeypatch):
    """With the threads of every other item, so its results do not depend on how many there were."""
    monkeypatch.delenv(STREAMS_ENV, raising=False)
    seen, lock = [], threading.Lock()
    run_all(_record(seen, lock), [0])
    assert len(seen) == 1 and seen[0][1].startswith("contextembed-stream") and seen[0][2] == 1


def test_other_devices_run_one_item_at_a_time_on_the_caller(two_threads, monkeypatch):
    monkeypatch.delenv(STREAMS_ENV, raising=False)
    seen, lock = [], threading.Lock()
    run_all(_record(seen, lock), [0, 1, 2], torch.device("meta"))
    assert [item for item, _, _ in seen] == [0, 1, 2]
    assert {name for _, name, _ in seen} == {threading.current_thread().name}


def test_streams_share_the_threads(monkeypatch):
    previous = torch.get_num_threads()
    torch.set_num_threads(4)
    try:
        monkeypatch.setenv(STREAMS_ENV, "2")
        seen, lock = [], threading.Lock()
        run_all(_record(seen, lock), list(range(8)))
        assert {threads for _, _, threads in seen} == {2}
    finally:
        torch.set_num_threads(previous)


def test_the_first_error_comes_back_after_running_items_finish(two_threads, monkeypatch):
    monkeypatch.delenv(STREAMS_ENV, raising=False)
    finished, lock = [], threading.Lock()

    def function(item):
        if item == 1:
            raise KeyError(f"bad item {item}")
        time.sleep(0.05)
        with lock:
            finished.append(item)

    with pytest.raises(KeyError, match="bad item 1"):
        run_all(function, list(range(40)))
    settled = list(finished)
    time.sleep(0.2)
    assert finished == settled, "nothing runs on after run_all raised"
    assert len(settled) < 39, "items not yet started were dropped"


def test_a_stream_running_streams_does_not_deadlock(two_threads, monkeypatch):
    monkeypatch.delenv(STREAMS_ENV, raising=False)
    seen, lock = [], threading.Lock()
    inner = _record(seen, lock)
    run_all(lambda item: run_all(inner, [item * 10, item * 10 + 1]), [0, 1, 2, 3])
    assert sorted(item for item, _, _ in seen) == [0, 1, 10, 11, 20, 21, 30, 31]


def _one_then_two_streams(encode) -> list:
    """``encode()`` with one batch at a time on one thread, then with two streams of one thread each:
    the same kernels on the same batches, only run side by side."""
    results = []
    previous = torch.get_num_threads()
    try:
        for threads in (1, 2):
            torch.set_num_threads(threads)
            assert cpu_streams() == (threads, 1)
            results.append(encode())
    finally:
        torch.set_num_threads(previous)
    return results


@pytest.mark.parametrize("precision", ["fp32", "bf16", "int8"])
def test_streams_give_the_features_of_one_batch_at_a_time(tiny_bert_dir, monkeypatch, precision):
    """Word vectors of many batches and one long windowed input, and of sentence pairs."""
    monkeypatch.delenv(STREAMS_ENV, raising=False)
    encoder = load_encoder(str(tiny_bert_dir), device="cpu", precision=precision, batch_tokens=64)
    sentences = [f"w{i} the EU rejects German call to boycott British lamb".split()[: 2 + i % 9] for i in range(30)]
    sentences.append("New York Times reported from Brussels on Tuesday".split() * 12)  # windows
    pairs = list(zip(sentences[:10], sentences[10:20]))
    with pytest.warns(LongPairWarning):  # the long sentence's pair runs in windows too
        one, two = _one_then_two_streams(lambda: (encoder.encode(sentences), list(encoder.iter_encode_pair_pieces(pairs))))
    assert len(one[0]) == len(two[0]) == 31
    for i, (a, b) in enumerate(zip(one[0], two[0])):
        assert a.shape[1] == len(sentences[i]), f"sentence {i}: one row per word"
        np.testing.assert_array_equal(a, b, err_msg=f"sentence {i}")
    for i, (a, b) in enumerate(zip(one[1], two[1])):
        for side_a, side_b in ((a.first, b.first), (a.second, b.second)):
            np.testing.assert_array_equal(side_a.hidden, side_b.hidden, err_msg=f"pair {i}")
        np.testing.assert_array_equal(a.cls, b.cls, err_msg=f"pair {i}")


@pytest.mark.parametrize("precision", ["fp32", "bf16", "int8"])
def test_elmo_streams_give_the_vectors_of_one_batch_at_a_time(tiny_elmo_dir, monkeypatch, precision):
    monkeypatch.delenv(STREAMS_ENV, raising=False)
    encoder = load_encoder(str(tiny_elmo_dir), device="cpu", precision=precision, batch_words=24)
    sentences = [f"w{i} the EU rejects German call to boycott British lamb".split()[: 1 + i % 10] for i in range(40)]
    sentences.insert(7, [])
    one, two = _one_then_two_streams(lambda: encoder.encode(sentences))
    assert len(one) == len(two) == 41
    for i, (a, b) in enumerate(zip(one, two)):
        assert a.shape[1] == len(sentences[i]), f"sentence {i}: one row per word"
        np.testing.assert_array_equal(a, b, err_msg=f"sentence {i}")


def test_streams_ran_the_batches(tiny_bert_dir, two_threads, monkeypatch):
    """The encoder's batches go through the streams (so the test above compares two ways)."""
    encoder = load_encoder(str(tiny_bert_dir), device="cpu", precision="fp32", batch_tokens=64)
    names = []
    original = encoder._run_batch

    def recording(*args, **kwargs):
        names.append(threading.current_thread().name)
        return original(*args, **kwargs)

    monkeypatch.setattr(encoder, "_run_batch", recording)
    monkeypatch.delenv(STREAMS_ENV, raising=False)
    encoder.encode([["word"] * n for n in range(1, 30)])
    assert len(names) > 2 and {name.startswith("contextembed-stream") for name in names} == {True}


@pytest.mark.slow
def test_forked_child_starts_its_own_streams():
    """A child forked after the parent's streams started runs streams of its own (the parent's
    threads were not copied) instead of waiting for them forever."""
    result = run_scenario(SCENARIO, timeout=60)
    assert "child ran 6 items on 2 streams" in result.stdout


ATEXIT_SCENARIO = """
import atexit, hashlib, os, sys
import numpy as np, torch
from contextembed import load_encoder

SENTENCES = [f"w{i} the EU rejects German call to boycott British lamb".split()[: 2 + i % 9] for i in range(30)]


def checksum(encoder):
    digest = hashlib.sha256()
    for vectors in encoder.encode(SENTENCES):
        digest.update(np.ascontiguousarray(vectors).tobytes())
    return digest.hexdigest()


def at_exit(encoder):
    print("exit, started streams", checksum(encoder), flush=True)  # the pool of 2 streams was joined
    torch.set_num_threads(4)
    os.environ["CONTEXTEMBED_CPU_STREAMS"] = "4"  # streams of one thread each, as before, in a pool never started
    print("exit, new streams", checksum(encoder), flush=True)


torch.set_num_threads(2)
os.environ["CONTEXTEMBED_CPU_STREAMS"] = "2"
encoder = load_encoder(sys.argv[1], device="cpu", precision="fp32", **{sys.argv[2]: 64})
print("normal", checksum(encoder), flush=True)
atexit.register(at_exit, encoder)
"""


@pytest.mark.slow
@pytest.mark.parametrize("family", ["transformer", "elmo"])
def test_encode_from_an_atexit_handler_runs_in_the_callers_thread(tiny_bert_dir, tiny_elmo_dir, tmp_path, family):
    """``encode()`` in an ``atexit`` handler raised "cannot schedule new futures after shutdown"
    (the interpreter had joined the pools' threads); its batches now run in the caller's thread,
    on a stream's share of the threads: the same bits as during the run."""
    script = tmp_path / "atexit_scenario.py"
    script.write_text(ATEXIT_SCENARIO)
    model, budget = (tiny_bert_dir, "batch_tokens") if family == "transformer" else (tiny_elmo_dir, "batch_words")
    result = run_scenario(script, model, budget, timeout=120)
    lines = dict(line.rsplit(" ", 1) for line in result.stdout.splitlines())
    assert set(lines) == {"normal", "exit, started streams", "exit, new streams"}, result.stderr[-3000:]
    assert lines["exit, started streams"] == lines["normal"] == lines["exit, new streams"]
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
