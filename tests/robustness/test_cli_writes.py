"""``contextembed embed`` stopped by SIGINT or SIGTERM at random points never loses or fakes data.

Each run starts the CLI as a subprocess (``tests/_cli.py``) over a previous output with known bytes
and sends a signal after a delay drawn from a seeded RNG (set ``CONTEXTEMBED_SIGNAL_SEED`` to draw
other delays): right after the CLI has set its handlers (before the model loads), while the
temporary file is being written, or at any time after the start. Afterwards either

- the status is 130 (SIGINT) or 143 (SIGTERM), stderr ends with one line saying the output was not
  written, there is no traceback, the previous output is byte-for-byte intact and nothing else is in
  the output folder (the temporary was removed); or
- the status is 0 (the run finished before the signal, or the signal came after the output was in
  place) or the run printed its summary: the output is complete and equal to an in-process
  reference.

A signal that lands outside the CLI's ``main`` (possible only in the "start" runs) gets Python's
default behaviour: SIGTERM kills the process (status -15; a shell reports 143), SIGINT raises
KeyboardInterrupt (status -2; a shell reports 130). Before ``main`` nothing has been written; after
it returned (while the interpreter exits) the output is complete, and checked as such.

SIGKILL cannot be handled: the previous output is still intact (the rename is the only write to its
name), but a hidden ``.out.npy.<hex>.partial`` temporary may remain beside it.
"""

from __future__ import annotations

import os
import random
import re
import signal
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from _cli import check_no_sockets, start_cli
from contextembed._runtime.files import PARTIAL_SUFFIX

# every test signals a real process (seconds each): none is in the quick tier
pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not sys.platform.startswith("linux"), reason="POSIX signals, /proc/<pid>/status")]

OLD = b"the previous output: it must survive every interrupted run"
SEED = int(os.environ.get("CONTEXTEMBED_SIGNAL_SEED", "20240611"))
WORDS = ["w%d" % i for i in range(400)]


def _delays(seed: int) -> list[tuple[str, str, float]]:
    """``(signal, phase, delay)`` of the static-vectors runs."""
    rng = random.Random(seed)
    writing = [(name, "writing", round(rng.uniform(0.0, 1.2), 3)) for name in ("SIGTERM", "SIGINT") * 2]
    start = [(name, "start", round(rng.uniform(0.8, 3.6), 3)) for name in ("SIGTERM", "SIGINT")]
    return [("SIGTERM", "handlers", 0.0), ("SIGINT", "handlers", 0.0), *writing, *start]


@pytest.fixture(scope="module")
def static_run(tmp_path_factory):
    """A static-vectors file, 300,000 sentences (about 1.5 s of writing on the dev box: longer than the
    "writing" delays) and the reference features."""
    from contextembed import load_encoder
    from contextembed.encoders import write_word2vec
    from contextembed.extraction import FeatureExtractor

    folder = tmp_path_factory.mktemp("static_run")
    vectors = folder / "vectors.txt"
    write_word2vec(vectors, WORDS, np.random.RandomState(0).randn(len(WORDS), 8).astype(np.float32))
    rng = random.Random(0)
    sentences = [[rng.choice(WORDS) for _ in range(rng.randint(1, 12))] for _ in range(300_000)]
    source = folder / "in.txt"
    source.write_text("".join(" ".join(s) + "\n" for s in sentences), encoding="utf-8")
    reference = np.concatenate(FeatureExtractor(load_encoder(str(vectors))).words(sentences))
    return str(vectors), source, reference


@pytest.fixture(scope="module")
def bert_input(tmp_path_factory):
    rng = random.Random(1)
    words = "the quick brown fox jumps over lazy dog New York Times reported in Washington".split()
    sentences = [[rng.choice(words) for _ in range(rng.randint(1, 12))] for _ in range(1500)]
    source = tmp_path_factory.mktemp("bert_run") / "in.txt"
    source.write_text("".join(" ".join(s) + "\n" for s in sentences), encoding="utf-8")
    return source, sentences


def _catches(pid: int, signum: int) -> bool:
    """Whether process ``pid`` has a handler for ``signum`` (the CLI sets one for SIGTERM)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    mask = re.search(r"^SigCgt:\s*([0-9a-fA-F]+)$", status, re.MULTILINE)
    return bool(mask and int(mask.group(1), 16) >> (signum - 1) & 1)


def _writing(folder: Path) -> bool:
    return any(name.endswith(PARTIAL_SUFFIX) for name in os.listdir(folder))


def _interrupt(tmp_path, args, signum: int, phase: str, delay: float):
    """Start ``embed`` over a previous ``out.npy``, wait for ``phase``, sleep ``delay``, send ``signum``."""
    folder = tmp_path / "out"
    folder.mkdir()
    out = folder / "out.npy"
    out.write_bytes(OLD)
    process = start_cli(["embed", *args, out, "--overwrite", "--quiet"])
    try:
        waits = {"start": lambda: True, "handlers": lambda: _catches(process.pid, signal.SIGTERM),
                 "writing": lambda: _writing(folder)}
        deadline = time.monotonic() + 60
        while process.poll() is None and not waits[phase]():
            assert time.monotonic() < deadline, f"the CLI never reached {phase!r}"
            time.sleep(0.002)
        time.sleep(delay)
        if process.poll() is None:
            process.send_signal(signum)
        summary, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    check_no_sockets(process)
    return process.returncode, summary, err, out


def _check(status: int, summary: str, err: str, out: Path, signum: int, reference, *,
           outside_possible: bool = False) -> None:
    names = sorted(os.listdir(out.parent))
    # the summary (stdout) was printed: the signal came after main returned, while Python exited
    finished = status == 0 or (status == -signum and '"sentences":' in summary)
    expected = ["out.npy", "out.npy.provenance.json"] if finished else ["out.npy"]  # the record comes with it
    assert names == expected, f"status {status}: left {names}\n{err}"
    if finished:
        assert status == 0 or outside_possible, err
        features = np.load(out)
        want = reference()
        assert features.shape == want.shape
        np.testing.assert_allclose(features, want, rtol=0, atol=1e-5)
        return
    assert out.read_bytes() == OLD, f"status {status}: the previous output changed\n{err}"
    if status == 128 + signum:
        assert "Traceback" not in err
        assert err.strip().splitlines()[-1] == (
            f"contextembed embed: interrupted by {signal.Signals(signum).name}; {out} was not written; the "
            "previous file is unchanged"
        )
    else:  # the signal came before the interpreter reached the CLI
        assert outside_possible and status == -signum, f"unexpected status {status}\n{err}"


@pytest.mark.parametrize("name, phase, delay", _delays(SEED), ids=lambda value: str(value))
def test_static_run_interrupted(static_run, tmp_path, name, phase, delay):
    vectors, source, reference = static_run
    signum = signal.Signals[name]
    status, summary, err, out = _interrupt(tmp_path, [vectors, source], signum, phase, delay)
    if phase == "handlers":  # right after the handlers are set, well before the run can end
        assert status == 128 + signum, err
    _check(status, summary, err, out, signum, lambda: reference, outside_possible=phase == "start")


@pytest.mark.parametrize("name, phase", [("SIGTERM", "handlers"), ("SIGINT", "writing")])
def test_transformer_run_interrupted(tiny_bert_dir, bert_input, tmp_path, name, phase):
    """SIGTERM while transformers and the model load; SIGINT between encoder batches."""
    source, sentences = bert_input
    signum = signal.Signals[name]
    delay = round(random.Random(SEED + signum).uniform(0.3, 2.5) if phase == "handlers" else
                  random.Random(SEED + signum).uniform(0.0, 0.8), 3)
    # fp32 in both processes: "auto" measures the CPU in each, and where bf16 and int8 run close the
    # two measurements can choose differently
    args = [tiny_bert_dir, source, "--layers=-1", "--precision", "fp32"]
    status, summary, err, out = _interrupt(tmp_path, args, signum, phase, delay)

    def reference():
        from contextembed import load_encoder
        from contextembed.extraction import FeatureExtractor

        encoder = load_encoder(str(tiny_bert_dir), device="cpu", precision="fp32")
        return np.concatenate(FeatureExtractor(encoder, -1).words(sentences))

    _check(status, summary, err, out, signum, reference)


def test_sigkill_can_leave_only_a_hidden_partial_file(static_run, tmp_path):
    vectors, source, _ = static_run
    status, _, _, out = _interrupt(tmp_path, [vectors, source], signal.SIGKILL, "writing", 0.2)
    assert status == -signal.SIGKILL
    assert out.read_bytes() == OLD
    others = sorted(set(os.listdir(out.parent)) - {"out.npy", "out.npy.provenance.json"})  # killed between renames
    assert all(re.fullmatch(r"\.out\.npy\.[A-Za-z0-9-]+@[0-9]+-[0-9a-f]+\.partial", name)
               for name in others), others
