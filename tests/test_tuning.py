"""Tuning records: what ``auto`` measured, remembered per machine and refused when it does not fit."""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import io
import json
import os
import re
import subprocess
import sys
import threading
import time
import warnings

import pytest

from contextembed._runtime import devices
from contextembed import tuning
from contextembed._runtime.streams import intra_op_threads
from contextembed.errors import SettingError
from contextembed.tuning import TuningWarning

CHOICES = ("slow", "fast")


def _check(result: dict) -> None:
    tuning.recorded_choice(result.get("choice"), CHOICES, "choice")
    tuning.recorded_speedup(result.get("speedup"), "speedup")


@pytest.fixture
def records(tmp_path, monkeypatch):
    """An empty tuning directory of its own, nothing remembered in this process."""
    folder = tmp_path / "tuning"
    monkeypatch.setenv(tuning.TUNING_DIR_ENV, str(folder))
    monkeypatch.delenv(tuning.TUNING_ENV, raising=False)
    tuning.forget()
    yield folder
    tuning.forget()


class Counter:
    def __init__(self, result=None, delay: float = 0.0):
        self.calls = 0
        self.result = result or {"choice": "fast", "speedup": 1.5}
        self.delay = delay

    def __call__(self) -> dict:
        self.calls += 1
        time.sleep(self.delay)
        return dict(self.result)


def _remember(measure, key=None) -> dict:
    return tuning.remembered("test kind", key or {"model": "m1"}, measure, _check, what="testing")


def _only_record(folder) -> str:
    (path,) = [p for p in folder.iterdir() if p.suffix == ".json"]
    return str(path)


def test_measured_once_then_read_by_a_later_process(records):
    measure = Counter()
    assert _remember(measure) == {"choice": "fast", "speedup": 1.5}
    found = json.loads(open(_only_record(records)).read())
    assert found["artifact"] == "tuning record" and found["kind"] == "test kind" and found["model"] == "m1"
    assert found["machine"]["cores"] >= 1 and found["machine"]["torch"] and found["result"]["choice"] == "fast"
    tuning.forget()  # as a new process
    again = Counter({"choice": "slow", "speedup": 0.5})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert _remember(again) == {"choice": "fast", "speedup": 1.5}
    assert measure.calls == 1 and again.calls == 0


def test_another_key_is_another_record(records):
    _remember(Counter(), {"model": "m1"})
    other = Counter({"choice": "slow", "speedup": 0.8})
    assert _remember(other, {"model": "m2"})["choice"] == "slow" and other.calls == 1
    assert len([p for p in records.iterdir() if p.suffix == ".json"]) == 2


def _edited(path: str, edit) -> None:
    record = json.loads(open(path).read())
    edit(record)
    with open(path, "w") as handle:
        json.dump(record, handle)


@pytest.mark.parametrize("damage, reason", [
    (lambda p: _edited(p, lambda r: r["result"].update(choice="fastest")), "not one of"),  # edited to a value never chosen
    (lambda p: _edited(p, lambda r: r["result"].update(speedup=float("1e308") * 10)), "holds Infinity"),  # not JSON
    (lambda p: _edited(p, lambda r: r["result"].update(speedup=-1)), "speedup"),
    (lambda p: _edited(p, lambda r: r.pop("result")), "no result"),
    (lambda p: _edited(p, lambda r: r["machine"].update(cpu="Another CPU")), "machine"),  # copied from another machine
    (lambda p: _edited(p, lambda r: r["machine"].update(torch="1.0.0")), "machine"),  # another torch
    (lambda p: _edited(p, lambda r: r.update(model="m9")), "model"),  # another model's, renamed
    (lambda p: _edited(p, lambda r: r.update(format=99)), "format"),
    (lambda p: open(p, "r+b").truncate(40), "damaged"),
    (lambda p: open(p, "wb").write(b"\xff\xfe not json"), "damaged"),
    (lambda p: open(p, "wb").write(b" " * (1 << 17)), "larger than"),
    (lambda p: (os.remove(p), os.symlink("/etc/hostname", p)), "not a regular file"),
])
def test_a_damaged_forged_or_foreign_record_is_measured_again(records, damage, reason):
    _remember(Counter())
    path = _only_record(records)
    damage(path)
    tuning.forget()
    again = Counter({"choice": "slow", "speedup": 0.7})
    with pytest.warns(TuningWarning, match=reason) as caught:
        assert _remember(again) == {"choice": "slow", "speedup": 0.7}
    assert again.calls == 1 and len(caught) == 1 and path in str(caught[0].message)
    assert json.loads(open(path).read())["result"]["choice"] == "slow"  # replaced by a valid record
    tuning.forget()
    assert _remember(Counter({"choice": "fast", "speedup": 9.0}))["choice"] == "slow"  # and used


# -- who may have written a record -------------------------------------------------------------------

ANOTHER_USER = 4242


def _planted(records) -> str:
    """A valid record saying "fast", as another user could write it (the hash is computable)."""
    _remember(Counter({"choice": "fast", "speedup": 5.0}))
    tuning.forget()
    return _only_record(records)


@pytest.mark.parametrize("loosen, reason", [
    (lambda folder: os.chmod(folder, 0o777), r"is writable by its group and others \(mode 0o777\)"),
    (lambda folder: os.chmod(folder, 0o775), r"is writable by its group \(mode 0o775\)"),
    (lambda folder: os.chmod(folder, 0o1777), r"is writable by its group and others \(mode 0o1777\)"),  # as /tmp
    (lambda folder: os.chown(folder, ANOTHER_USER, -1), rf"is owned by user {ANOTHER_USER}"),
    (lambda folder: (os.rename(folder, str(folder) + "-real"), os.symlink(str(folder) + "-real", folder)),
     "is a symbolic link"),
])
def test_a_tuning_directory_another_user_could_write_is_not_trusted(records, loosen, reason):
    path = _planted(records)
    planted = open(path, "rb").read()
    loosen(records)
    measure = Counter({"choice": "slow", "speedup": 0.5})
    with pytest.warns(TuningWarning) as caught:
        assert _remember(measure) == {"choice": "slow", "speedup": 0.5}  # measured here, the record not used
        assert _remember(measure, {"model": "m2"})["choice"] == "slow"
    assert measure.calls == 2 and len(caught) == 1, [str(w.message) for w in caught]
    message = str(caught[0].message)
    assert re.search(rf"CONTEXTEMBED_TUNING_DIR='{re.escape(str(records))}': the tuning directory "
                     rf"{re.escape(str(records))} {reason}.*, so its records are neither used nor written", message)
    assert "chmod go-w" in message
    assert open(path, "rb").read() == planted and len(list(records.glob("*.json"))) == 1  # nothing written there


@pytest.mark.parametrize("loosen, reason", [
    (lambda path: os.chmod(path, 0o666), r"is writable by its group and others \(mode 0o666\)"),
    (lambda path: os.chmod(path, 0o664), r"is writable by its group \(mode 0o664\)"),
    (lambda path: os.chown(path, ANOTHER_USER, -1), rf"is owned by user {ANOTHER_USER}, not by this user"),
])
def test_a_record_another_user_could_write_is_measured_again(records, loosen, reason):
    path = _planted(records)
    loosen(path)
    measure = Counter({"choice": "slow", "speedup": 0.5})
    with pytest.warns(TuningWarning, match=reason) as caught:
        assert _remember(measure)["choice"] == "slow"
    assert measure.calls == 1 and len(caught) == 1 and str(caught[0].message).startswith(path)
    assert "it is measured again" in str(caught[0].message)
    found = os.stat(path)  # replaced by this process's own record
    assert found.st_uid == os.getuid() and found.st_mode & 0o777 == 0o644
    tuning.forget()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert _remember(Counter())["choice"] == "slow"


def test_records_are_written_so_that_this_user_trusts_them_whatever_the_umask(records):
    saved = os.umask(0o002)  # user private groups: open() and makedirs would make them group-writable
    try:
        _remember(Counter())
    finally:
        os.umask(saved)
    assert records.stat().st_mode & 0o777 == 0o755  # others read what root prepared ahead, none writes
    assert os.stat(_only_record(records)).st_mode & 0o777 == 0o644
    assert os.stat(_only_record(records) + ".lock").st_mode & 0o777 == 0o644
    tuning.forget()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert _remember(Counter({"choice": "slow", "speedup": 0.5}))["choice"] == "fast"


def test_records_root_prepared_ahead_are_trusted(records, monkeypatch):
    """As another user (simulated), root's directory and records (an image prepared ahead) are used."""
    from contextembed._runtime import files as _files

    path = _planted(records)
    monkeypatch.setattr(_files, "trusted_uids", lambda: frozenset({1000, 0}))
    assert os.stat(path).st_uid == 0 and records.stat().st_uid == 0
    measure = Counter({"choice": "slow", "speedup": 0.5})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert _remember(measure)["choice"] == "fast" and measure.calls == 0


def test_the_lock_beside_a_record_never_follows_a_link(records, tmp_path):
    path = _planted(records)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    os.remove(path + ".lock")
    os.symlink(elsewhere / "planted.lock", path + ".lock")
    os.remove(path)  # so that the lock is needed
    measure = Counter({"choice": "slow", "speedup": 0.5})
    with pytest.warns(TuningWarning, match=r"the lock of tuning record .*\.lock is a symbolic link") as caught:
        assert _remember(measure)["choice"] == "slow"
    assert measure.calls == 1 and len(caught) == 1
    assert list(elsewhere.iterdir()) == []  # nothing created, nor locked, outside the tuning directory
    assert os.path.islink(path + ".lock")


@pytest.mark.parametrize("prepare", [lambda lock: os.mkfifo(lock), lambda lock: os.mkdir(lock)])
def test_a_lock_that_is_not_a_regular_file_is_refused(records, prepare):
    path = _planted(records)
    os.remove(path)
    os.remove(path + ".lock")
    prepare(path + ".lock")
    with pytest.warns(TuningWarning, match=r"\.lock is not a regular file"):
        assert _remember(Counter({"choice": "slow", "speedup": 0.5}))["choice"] == "slow"


# -- damaged records: measured again, never a crash -------------------------------------------------------


@pytest.mark.parametrize("text, reason", [
    ('{"result": ' * 1500 + "1" + "}" * 1500, "nested 1500 levels deep"),
    ("[" * 1500 + "]" * 1500, "nested 1500 levels deep"),
    ('{"artifact": "tuning record", "result": {"choice": "fast", "speedup": NaN}}', "holds NaN"),
], ids=["deep-object", "deep-array", "nan"])
def test_a_record_nested_deep_or_not_json_is_measured_again(records, text, reason):
    path = _planted(records)
    with open(path, "w") as handle:
        handle.write(text)
    measure = Counter({"choice": "slow", "speedup": 0.5})
    with pytest.warns(TuningWarning, match=reason) as caught:
        assert _remember(measure)["choice"] == "slow"
    assert measure.calls == 1 and len(caught) == 1 and path in str(caught[0].message)


def test_a_measurement_that_fails_its_own_check_is_an_error(records):
    with pytest.raises(ValueError, match="not one of"):
        _remember(Counter({"choice": "medium", "speedup": 1.0}))
    assert not [p for p in records.iterdir() if p.suffix == ".json"]


def test_two_processes_measuring_at_once_measure_once(records):
    """The second waits on the lock, then adopts the first's record (threads: flock is per open file)."""
    measure = Counter(delay=0.5)
    results = []

    def run():
        results.append(tuning.remembered("test kind", {"model": "m1"}, measure, _check, what="testing"))
        tuning.forget()

    threads = [threading.Thread(target=run) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert measure.calls == 1 and results[0] == results[1]
    json.loads(open(_only_record(records)).read())  # one valid record
    assert not [p for p in records.iterdir() if p.name.endswith(".partial")]


def test_a_lock_held_too_long_is_waited_for_only_so_long(records, monkeypatch):
    import fcntl

    monkeypatch.setattr(tuning, "LOCK_WAIT", 0.3)
    _remember(Counter())
    path = _only_record(records)
    tuning.forget()
    with open(path + ".lock", "a+b") as held:
        fcntl.flock(held.fileno(), fcntl.LOCK_EX)
        monkeypatch.setenv(tuning.TUNING_ENV, "refresh")
        measure = Counter({"choice": "slow", "speedup": 0.9})
        start = time.monotonic()
        with pytest.warns(TuningWarning, match="measuring in this one too"):
            assert _remember(measure)["choice"] == "slow"
        assert time.monotonic() - start < 5 and measure.calls == 1


@pytest.mark.parametrize("where", ["/proc/contextembed-tuning", "file/below"])
def test_an_unwritable_directory_costs_the_measurement_not_the_job(records, tmp_path, monkeypatch, where):
    if where == "file/below":
        (tmp_path / "file").write_text("x")
        where = str(tmp_path / "file" / "below")
    monkeypatch.setenv(tuning.TUNING_DIR_ENV, where)
    measure = Counter()
    with pytest.warns(TuningWarning, match=r"CONTEXTEMBED_TUNING_DIR=.*cannot record") as caught:
        assert _remember(measure)["choice"] == "fast"
        assert _remember(measure, {"model": "m2"})["choice"] == "fast"  # another measurement: warned once
    assert measure.calls == 2 and len(caught) == 1


def test_tuning_off_and_refresh(records, monkeypatch):
    monkeypatch.setenv(tuning.TUNING_ENV, "off")
    measure = Counter()
    _remember(measure)
    tuning.forget()
    _remember(measure)
    assert measure.calls == 2
    assert not records.exists() or not list(records.glob("*.json"))  # nothing written
    monkeypatch.setenv(tuning.TUNING_ENV, "on")
    _remember(Counter())
    tuning.forget()
    monkeypatch.setenv(tuning.TUNING_ENV, "refresh")
    fresh = Counter({"choice": "slow", "speedup": 0.4})
    assert _remember(fresh)["choice"] == "slow" and fresh.calls == 1
    monkeypatch.setenv(tuning.TUNING_ENV, "on")
    tuning.forget()
    assert _remember(Counter())["choice"] == "slow"  # the refreshed record


@pytest.mark.parametrize("value", ["yes", "0", "ON", "ｏｎ", "nan", "-1"])
def test_a_bad_tuning_setting_is_named(records, monkeypatch, value):
    monkeypatch.setenv(tuning.TUNING_ENV, value)
    with pytest.raises(SettingError, match=rf"CONTEXTEMBED_TUNING={value!r}: expected 'on', 'refresh' or 'off'"):
        _remember(Counter())


def test_slow_steps_are_announced_on_stderr_only_when_announcing(records, monkeypatch, capsys):
    monkeypatch.setattr(tuning, "ANNOUNCE_AFTER", 0.05)
    _remember(Counter(delay=0.2), {"model": "quiet"})
    assert capsys.readouterr().err == ""
    with tuning.announcing():
        _remember(Counter(delay=0.2), {"model": "said"})
        _remember(Counter(delay=0.0), {"model": "quick"})
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2, err
    assert err[0].startswith("contextembed: testing, once for this machine (remembered in ") and str(records) in err[0]
    assert err[1].startswith("contextembed: testing: done in ")


@pytest.mark.slow
def test_cpu_precision_is_remembered_across_processes(records):
    """Fresh interpreters: the first measures (and says so), the second reads the same choice."""
    code = ("import contextembed.tuning as t, contextembed._runtime.devices as d; t.ANNOUNCE_AFTER = 0\n"
            "with t.announcing(): print(d.auto_cpu_precision(int8_allowed=True), d.cpu_speedups())")
    env = {**os.environ, tuning.TUNING_DIR_ENV: str(records)}
    env.pop(devices.AUTO_CPU_PRECISION_ENV, None)
    runs = [subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
            for _ in range(2)]
    assert all(run.returncode == 0 for run in runs), [run.stderr for run in runs]
    assert runs[0].stdout == runs[1].stdout  # the same choice and the same speeds
    assert "measuring" in runs[0].stderr and "measuring" not in runs[1].stderr


def test_hopeless_precisions_are_screened_not_timed(untuned, monkeypatch):
    calls = []

    def best_times(runs, rounds=12, warmup=4):
        calls.append((sorted(runs), rounds))
        return {name: (0.001 if name == "fp32" else 0.01) for name in runs}  # int8 10x slower than fp32

    monkeypatch.setattr(devices, "best_times", best_times)
    monkeypatch.setattr(devices, "cpu_has_fast_bf16", lambda: False)
    assert devices._measure_speedups(("int8",)) == {"int8": pytest.approx(0.1)}
    assert calls == [(["fp32", "int8"], 2), (["fp32"], 12)]  # screened in two short rounds, never timed in full


def test_int8_without_dot_product_units_warns_once(monkeypatch):
    import torch

    monkeypatch.setattr(devices, "_WARNED_INT8", False)
    monkeypatch.setattr(tuning, "cpu_flags", lambda: frozenset({"avx2", "fma"}))
    with pytest.warns(devices.SlowPrecisionWarning, match="without integer dot-product units") as caught:
        devices.resolve_precision("int8", torch.device("cpu"))
        devices.resolve_precision("int8", torch.device("cpu"))
    assert len(caught) == 1
    monkeypatch.setattr(devices, "_WARNED_INT8", False)
    monkeypatch.setattr(tuning, "cpu_flags", lambda: frozenset({"avx2", "avx512_vnni"}))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert devices.resolve_precision("int8", torch.device("cpu")) == "int8"


def test_machine_names_what_a_measurement_depends_on():
    import torch

    found = tuning.machine()
    assert found["threads"] == torch.get_num_threads() and found["torch"] == torch.__version__
    assert found["cores"] == len(os.sched_getaffinity(0)) and found["cpu"]
    with intra_op_threads(1):
        assert tuning.machine()["threads"] == 1  # other threads: another record


# -- a resumed run adopts what its outputs recorded ---------------------------------------------------


@pytest.fixture
def two_files(tmp_path):
    root = tmp_path / "corpus"
    root.mkdir()
    (root / "a.txt").write_text("the quick brown fox\nNew York\n", encoding="utf-8")
    (root / "b.txt").write_text("naïve café\n", encoding="utf-8")
    return root


def test_a_resumed_run_adopts_the_recorded_precision(tiny_bert_dir, two_files, tmp_path, capsys):
    from contextembed.corpus import embed_corpus
    from contextembed.io import read_output_record

    out = tmp_path / "out"
    first = embed_corpus(str(tiny_bert_dir), str(two_files), str(out), device="cpu", precision="bf16",
                         show_progress=False)
    (out / "b.npz").unlink()  # the run was interrupted before b
    resumed = embed_corpus(str(tiny_bert_dir), str(two_files), str(out), device="cpu", precision="auto",
                           show_progress=True)
    assert resumed["skipped"] == 1 and resumed["embedded"] == 1 and resumed["precision"] == "bf16"
    assert resumed["adopted"] == {"precision": "bf16", "from": first["outputs"][0]}
    assert "resuming with precision='bf16' as recorded in" in capsys.readouterr().err
    assert read_output_record(str(out / "b.npz"))["precision"] == "bf16"


def test_a_named_precision_is_not_replaced_on_resume(tiny_bert_dir, two_files, tmp_path):
    from contextembed.corpus import embed_corpus
    from contextembed.errors import ProvenanceError

    out = tmp_path / "out"
    embed_corpus(str(tiny_bert_dir), str(two_files), str(out), device="cpu", precision="bf16", show_progress=False)
    with pytest.raises(ProvenanceError, match="precision='bf16', but this run has precision='fp32'"):
        embed_corpus(str(tiny_bert_dir), str(two_files), str(out), device="cpu", precision="fp32",
                     show_progress=False)


def test_nothing_is_adopted_from_an_output_without_a_readable_record(tiny_bert_dir, two_files, tmp_path):
    from contextembed.corpus import adopt_recorded, plan

    jobs = plan(str(two_files), str(tmp_path / "out"), "npz")
    (tmp_path / "out").mkdir()
    open(jobs[0].output, "wb").write(b"not an output")
    assert adopt_recorded(jobs, {jobs[0]}, {"precision": "auto"}) == {}
    assert adopt_recorded(jobs, set(), {"precision": "auto"}) == {}


# -- contextembed tune ---------------------------------------------------------------------------------


@pytest.mark.slow
def test_tune_measures_records_and_then_reads(tiny_bert_dir, records, monkeypatch):
    from contextembed.cli import main

    monkeypatch.delenv(devices.AUTO_CPU_PRECISION_ENV, raising=False)
    monkeypatch.setattr(devices, "_SPEEDUPS", {})
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        assert main(["tune", str(tiny_bert_dir), "--device", "cpu", "--quiet"]) == 0
    summary = json.loads(printed.getvalue())
    assert set(summary["chosen"]) == {"backend=torch", "backend=auto"}
    assert summary["tuning_dir"] == str(records)
    kinds = {name.rsplit("-", 1)[0] for name in summary["records"]}
    has_engine = importlib.util.find_spec("openvino") is not None
    assert kinds >= {"cpu-precision"} | ({"transformer-backend"} if has_engine else set())
    assert sorted(summary["records"]) == sorted(p.name for p in records.glob("*.json"))
    # later processes read what tune wrote: nothing is measured again
    tuning.forget()
    monkeypatch.setattr(devices, "_SPEEDUPS", {})
    monkeypatch.setattr(devices, "_measure_speedups", lambda names: pytest.fail("measured after tune"))
    from contextembed import load_encoder

    encoder = load_encoder(str(tiny_bert_dir), device="cpu", backend="auto")
    assert {"backend": encoder.backend, "precision": encoder.precision} == summary["chosen"]["backend=auto"]
    # --refresh measures again
    calls = []
    monkeypatch.setattr(devices, "_measure_speedups", lambda names: calls.append(names) or {n: 0.5 for n in names})
    with contextlib.redirect_stdout(io.StringIO()):
        assert main(["tune", str(tiny_bert_dir), "--device", "cpu", "--backend", "torch", "--refresh", "--quiet"]) == 0
    assert calls and all(value == 0.5 for value in json.loads(next(records.glob("cpu-precision-*.json")).read_text())
                         ["result"].values())


def test_tune_refuses_what_load_encoder_refuses(tiny_bert_dir, capsys):
    from contextembed.cli import main

    with pytest.raises(SystemExit):
        main(["tune", str(tiny_bert_dir), "--precision", "int4"])
    assert "precision='int4' is not one of" in capsys.readouterr().err
    assert main(["tune", "/no/such/model"]) == 2
    assert "contextembed tune: error:" in capsys.readouterr().err


# -- a record the measurement could never write ---------------------------------------------------------


@pytest.mark.parametrize("result, precision, reason", [
    ({"backend": "torch", "speedup": 3.0, "engine_precision": "fp32"}, "auto",
     r"recorded backend='torch' is not what its own numbers imply \(speedup=3\.0 .* choose 'openvino'\)"),
    ({"backend": "openvino", "speedup": 0.5, "engine_precision": "fp32"}, "auto", "choose 'torch'"),
    ({"backend": "openvino", "speedup": None}, "auto", "speedup=None .* choose 'torch'"),
    ({"backend": "openvino"}, "auto", r"lacks \['speedup'\]; expected \['backend', 'speedup'\]"),
    ({"backend": "torch", "speedup": 1.0, "engine_precision": "int8"}, "fp32", r"engine_precision='int8' is not one of 'fp32'"),
    ({"backend": "torch", "speedup": 1.0, "engine_precision": "int4"}, "auto", "engine_precision='int4' is not one of"),
    ({"backend": "openvino", "speedup": 2.0}, "auto", r"lacks \['engine_precision'\]"),
    ({"backend": "openvino", "speedup": 2.0, "engine_precision": "fp32", "note": "x"}, "auto",
     r"fields the measurement never writes \['note'\]"),
    ({"backend": "openvino", "speedup": "2.0", "engine_precision": "fp32"}, "auto", "not a speedup"),
    ({"backend": ["openvino"], "speedup": 2.0, "engine_precision": "fp32"}, "auto", "not one of"),
])
def test_a_backend_record_the_measurement_could_not_write_is_refused(result, precision, reason):
    from contextembed.encoders.transformer._runtime_choice import check_backend_record

    with pytest.raises(ValueError, match=reason):
        check_backend_record(result, precision)


@pytest.mark.parametrize("result, precision", [
    ({"backend": "openvino", "speedup": 3.0, "engine_precision": "int8"}, "auto"),
    ({"backend": "torch", "speedup": 1.0, "engine_precision": "fp32"}, "fp32"),
    ({"backend": "torch", "speedup": None}, "auto"),
])
def test_a_backend_record_the_measurement_writes_is_used(result, precision):
    from contextembed.encoders.transformer._runtime_choice import check_backend_record, chosen_backend

    check_backend_record(result, precision)
    assert chosen_backend(result["speedup"]) == result["backend"]


ALL_ENGINE = ("fp32", "bf16", "int8")


@pytest.mark.parametrize("result, candidates, reason", [
    ({"precision": "fp32", "speedups": [1.0], "int8_cosine": 0.999}, ALL_ENGINE, r"speedups=\[1\.0\] is not an object"),
    ({"precision": "fp32", "speedups": None, "int8_cosine": 0.999}, ALL_ENGINE, "speedups=None is not an object"),
    ({"precision": "fp32", "speedups": "fast", "int8_cosine": 0.999}, ALL_ENGINE, "is not an object"),
    ({"precision": "fp32", "speedups": {"bf16": 2.0, "int8": 1.0}, "int8_cosine": 0.999}, ALL_ENGINE,
     r"recorded precision='fp32' is not what its own numbers imply .* choose 'bf16'"),
    ({"precision": "bf16", "speedups": {"bf16": 1.0, "int8": 5.0}, "int8_cosine": 0.999}, ALL_ENGINE, "choose 'int8'"),
    ({"precision": "int8", "speedups": {"bf16": 1.0, "int8": 5.0}, "int8_cosine": 0.5}, ALL_ENGINE,
     r"speedups of \['bf16', 'int8'\], but \['bf16'\] were timed"),  # int8 never timed below the cosine bar
    ({"precision": "int8", "speedups": {"int8": 5.0}, "int8_cosine": 0.999}, ALL_ENGINE, r"but \['bf16', 'int8'\]"),
    ({"precision": "int8", "speedups": {"int8": 5.0}, "int8_cosine": 0.999}, ("fp32",), "'int8' is not one of"),
    ({"precision": "fp32", "speedups": {}, "int8_cosine": 0.999}, ("fp32",), "int8 is no candidate"),
    ({"precision": "fp32", "speedups": {"bf16": 1.0, "int8": 1.0}, "int8_cosine": None}, ALL_ENGINE, "not a cosine"),
    ({"precision": "fp32", "speedups": {"bf16": 1.0, "int8": 1.0}}, ALL_ENGINE, r"lacks \['int8_cosine'\]"),
    ({"precision": "fp32", "speedups": {"bf16": 1.0, "int8": -1.0}, "int8_cosine": 0.999}, ALL_ENGINE, "not a speedup"),
])
def test_an_engine_precision_record_the_measurement_could_not_write_is_refused(monkeypatch, result, candidates, reason):
    """``"speedups": [1.0]`` or ``null`` once raised AttributeError (issue 53, item 4)."""
    from contextembed.encoders.transformer import _engine as engine, _engine_choice as engine_choice

    monkeypatch.setattr(engine_choice, "_auto_candidates", lambda: candidates)
    with pytest.raises(ValueError, match=reason):
        engine_choice.check_precision_record(result)


@pytest.mark.parametrize("result, candidates", [
    ({"precision": "int8", "speedups": {"bf16": 2.0, "int8": 2.4}, "int8_cosine": 0.999}, ALL_ENGINE),
    ({"precision": "bf16", "speedups": {"bf16": 2.0}, "int8_cosine": 0.5}, ALL_ENGINE),
    ({"precision": "fp32", "speedups": {}, "int8_cosine": None}, ("fp32",)),
    ({"precision": "fp32", "speedups": {"int8": 1.0}, "int8_cosine": 0.999}, ("fp32", "int8")),
])
def test_an_engine_precision_record_the_measurement_writes_is_used(monkeypatch, result, candidates):
    from contextembed.encoders.transformer import _engine as engine, _engine_choice as engine_choice

    monkeypatch.setattr(engine_choice, "_auto_candidates", lambda: candidates)
    engine_choice.check_precision_record(result)
    assert engine_choice.chosen_precision(result["speedups"]) == result["precision"]


def test_a_forged_backend_record_is_measured_again_not_adopted(records):
    """``{"backend": "torch", "speedup": 3.0}`` passed the old check (choice and range apart)."""
    from contextembed.encoders.transformer._runtime_choice import check_backend_record

    def remember(measure):
        return tuning.remembered("transformer backend", {"model": "m1", "precision": "auto"}, measure,
                                 lambda result: check_backend_record(result, "auto"), what="testing")

    remember(Counter({"backend": "openvino", "speedup": 3.0, "engine_precision": "fp32"}))
    path = _only_record(records)
    _edited(path, lambda r: r["result"].update(backend="torch"))
    tuning.forget()
    again = Counter({"backend": "openvino", "speedup": 2.5, "engine_precision": "fp32"})
    with pytest.warns(TuningWarning, match=r"backend='torch' is not what its own numbers imply") as caught:
        assert remember(again)["backend"] == "openvino"
    assert again.calls == 1 and len(caught) == 1


def test_load_encoder_measures_again_over_a_record_nested_deep(tiny_bert_dir, records, monkeypatch):
    """A cpu-precision record nested 1,500 deep raised RecursionError from load_encoder (issue 53, item 4)."""
    from contextembed import load_encoder

    monkeypatch.delenv(devices.AUTO_CPU_PRECISION_ENV, raising=False)
    monkeypatch.setattr(devices, "_SPEEDUPS", {})
    monkeypatch.setattr(devices, "_measure_speedups", lambda names: {name: 0.5 for name in names})
    assert load_encoder(str(tiny_bert_dir), device="cpu", precision="auto").precision == "fp32"
    (path,) = records.glob("cpu-precision-*.json")
    path.write_text('{"result": ' * 1500 + "{}" + "}" * 1500)
    tuning.forget()
    monkeypatch.setattr(devices, "_SPEEDUPS", {})
    with pytest.warns(TuningWarning, match=rf"{re.escape(str(path))} has a damaged provenance record \(nested 1501"):
        assert load_encoder(str(tiny_bert_dir), device="cpu", precision="auto").precision == "fp32"
    assert json.loads(path.read_text())["result"]  # measured again and recorded


def _counted_sleeps(seconds: float) -> tuple[dict, dict]:
    counts = {"a": 0, "b": 0}

    def run(name: str) -> None:
        counts[name] += 1
        time.sleep(seconds)

    return counts, {name: functools.partial(run, name) for name in counts}


def test_a_bounded_timing_of_slow_runs_takes_one_warm_up_and_what_the_budget_holds():
    """At base size 8 rounds of the engine's probe batch took 50 s of backend='auto''s 124 s."""
    counts, runs = _counted_sleeps(0.05)
    times = devices.best_times(runs, rounds=12, warmup=4, budget=0.25)  # a round: 0.1 s; 11 more: 1.1 s
    assert counts == {"a": 3, "b": 3}  # one warm-up and devices.MIN_TIMED_ROUNDS timed rounds
    assert all(0.05 <= value < 1.0 for value in times.values())


def test_a_bounded_timing_of_quick_runs_runs_every_round():
    counts, runs = _counted_sleeps(0.0)
    devices.best_times(runs, rounds=12, warmup=4, budget=60.0)
    assert counts == {"a": 12, "b": 12}
    counts, runs = _counted_sleeps(0.02)
    devices.best_times(runs, rounds=5, warmup=2)  # no budget: every round, however long
    assert counts == {"a": 5, "b": 5}


def test_the_engine_times_within_its_budget(monkeypatch):
    from contextembed.encoders.transformer import _engine as engine, _engine_choice as engine_choice

    seen = []
    monkeypatch.setattr(devices, "best_times", lambda runs, rounds, warmup, budget: seen.append(budget) or {})
    engine_choice.best_times({})
    assert seen == [engine_choice.TIMING_BUDGET]


@pytest.mark.parametrize("problem", ["others can write it", "tuning off"])
def test_tune_that_could_record_nothing_is_an_error_naming_why(tiny_bert_dir, records, monkeypatch, capsys, problem):
    """It used to measure and print its summary as if the records were written."""
    from contextembed.cli import main

    records.mkdir()
    if problem == "others can write it":
        records.chmod(0o777)
        expected = f"the tuning directory {records} cannot hold records"
    else:
        monkeypatch.setenv(tuning.TUNING_ENV, "off")
        expected = f"{tuning.TUNING_ENV}=off: tune would measure and record nothing"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TuningWarning)  # the directory's own warning says what is wrong with it
        assert main(["tune", str(tiny_bert_dir), "--device", "cpu", "--quiet"]) == 2
    captured = capsys.readouterr()
    assert expected in captured.err and captured.out == ""
    assert list(records.glob("*.json")) == []
