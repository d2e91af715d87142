"""Settings from environment variables (:mod:`contextembed.settings`): every spelling accepted is
documented, everything else (0 where it makes no sense, negatives, fractions, exponents, NaN/inf,
non-ASCII digits such as '²' or '٣', huge numbers) is an error naming the variable and the value;
a bad value never breaks ``import contextembed``, it fails the first use; nothing is silently
turned off.
"""

from __future__ import annotations

import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from contextembed import settings
from contextembed.errors import SettingError
from contextembed.pretraining._distributed import world_from_env
from contextembed._runtime import store as _store
from contextembed._runtime import store_files as _store_files
from contextembed._runtime import store_memory as _memory
from contextembed._runtime.store import BUDGET_ENV

REPO_ROOT = Path(__file__).resolve().parents[2]
#: spellings that are not a whole number in ASCII digits
NOT_WHOLE = ["", "abc", "-5", "+5", "1.5", "1e3", "1e20", "1_000", "1,000", "nan", "inf", "²", "٣", "８", "5 streams"]


@pytest.mark.parametrize("text, expected", [("0", 0), ("7", 7), (" 12\t", 12), ("000123", 123)])
def test_whole_numbers_in_ascii_digits_are_read(text, expected):
    assert settings.parse_whole_number("X", text) == expected


@pytest.mark.parametrize("text", [t for t in NOT_WHOLE if t])
def test_anything_else_is_not_a_whole_number(text):
    with pytest.raises(SettingError, match=re.escape(f"X={text!r}: expected a whole number >= 0 written in ASCII")):
        settings.parse_whole_number("X", text)


def test_a_whole_number_out_of_range_names_the_range():
    with pytest.raises(SettingError, match=re.escape("RANK='4': expected a whole number from 0 to 3")):
        settings.parse_whole_number("RANK", "4", maximum=3)
    with pytest.raises(SettingError, match=re.escape("N='0': expected a positive whole number")):
        settings.parse_whole_number("N", "0", minimum=1)
    with pytest.raises(SettingError, match="has 40 digits"):
        settings.parse_whole_number("N", "9" * 40)  # not a 40-digit int(), nor a ValueError from Python's digit limit


@pytest.mark.parametrize("text, expected", [
    ("0", 0), ("1073741824", 1 << 30), ("512MB", 512 * 10**6), ("512 mb", 512 * 10**6), ("1GiB", 1 << 30),
    ("1gib", 1 << 30), ("3KB", 3000), ("3KiB", 3072), ("2TB", 2 * 10**12), ("7B", 7), (" 1 GiB ", 1 << 30),
    ("1024TiB", settings.MAX_BYTES),
])
def test_byte_sizes_with_units_are_read(text, expected):
    assert settings.parse_byte_size("X", text) == expected


@pytest.mark.parametrize("text", [t for t in NOT_WHOLE if t] + ["1G", "1.5GB", "GB", "1 GB GB", "1PB", "1e9B"])
def test_anything_else_is_not_a_byte_size(text):
    with pytest.raises(SettingError, match=re.escape(f"X={text!r}: expected a byte size")):
        settings.parse_byte_size("X", text)


def test_a_byte_size_beyond_1_pib_is_refused():
    with pytest.raises(SettingError, match=re.escape("X='1025TiB' is 1,126,999,418,470,400 bytes; expected at most")):
        settings.parse_byte_size("X", "1025TiB")


def test_unset_or_blank_variables_take_the_default(monkeypatch):
    monkeypatch.delenv("CONTEXTEMBED_TEST_SETTING", raising=False)
    assert settings.whole_number("CONTEXTEMBED_TEST_SETTING", 5) == 5
    monkeypatch.setenv("CONTEXTEMBED_TEST_SETTING", "  ")
    assert settings.byte_size("CONTEXTEMBED_TEST_SETTING", 9) == 9
    monkeypatch.setenv("CONTEXTEMBED_TEST_SETTING", "\u00a0")  # a no-break space is a value, and not a number
    with pytest.raises(SettingError, match=re.escape("CONTEXTEMBED_TEST_SETTING='\\xa0': expected a whole number")):
        settings.whole_number("CONTEXTEMBED_TEST_SETTING", 5)


# -- CONTEXTEMBED_MEMORY_BUDGET ---------------------------------------------------------------


@pytest.fixture
def budget(monkeypatch):
    """The budget read afresh from the environment, and given back after the test."""
    monkeypatch.setattr(_memory, "_budget", None)


@pytest.mark.parametrize("value", ["abc", "1e9", "-5", "1.5GB", "²"])
def test_a_bad_budget_fails_at_first_use_naming_the_variable(monkeypatch, budget, value):
    monkeypatch.setenv(BUDGET_ENV, value)
    with pytest.raises(SettingError, match=re.escape(f"{BUDGET_ENV}={value!r}: expected a byte size")):
        _store.memory_budget()


@pytest.mark.parametrize("value", ["0", "1MB", "2000PB"])
def test_a_budget_out_of_range_fails_naming_the_variable(monkeypatch, budget, value):
    monkeypatch.setenv(BUDGET_ENV, value)
    with pytest.raises(ValueError, match=re.escape(BUDGET_ENV)):
        _store.memory_budget()


@pytest.mark.parametrize("value, expected", [("512MB", 512 * 10**6), ("3 GiB", 3 << 30), ("", None)])
def test_the_budget_is_read_at_first_use(monkeypatch, budget, value, expected):
    monkeypatch.setenv(BUDGET_ENV, value)
    assert _store.memory_budget() == (expected or _memory.default_budget())


def test_the_old_cache_variable_is_not_read_silently(monkeypatch, budget):
    monkeypatch.setenv("CONTEXTEMBED_CACHE_BYTES", "1GiB")
    monkeypatch.setattr(_store_files, "_WARNED", set())
    with pytest.warns(FutureWarning, match="CONTEXTEMBED_CACHE_BYTES is no longer read.*CONTEXTEMBED_MEMORY_BUDGET"):
        _store.memory_budget()


@pytest.mark.slow
def test_a_bad_setting_does_not_break_the_import():
    """``import contextembed`` (and its scikit-learn adapters) with every variable set wrong; the
    first use then names the variable."""
    code = (
        "import contextembed, contextembed.sklearn\n"
        "from contextembed._runtime.store import memory_budget\n"
        "from contextembed._runtime.streams import cpu_streams\n"
        "for use in (memory_budget, cpu_streams):\n"
        "    try:\n"
        "        use()\n"
        "    except ValueError as error:\n"
        "        print(type(error).__name__, error)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), BUDGET_ENV: "abc",
           "CONTEXTEMBED_CPU_STREAMS": "²", "CONTEXTEMBED_AUTO_CPU_PRECISION": "fp8", "WORLD_SIZE": "x"}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"SettingError {BUDGET_ENV}='abc'" in result.stdout
    assert "SettingError CONTEXTEMBED_CPU_STREAMS='²'" in result.stdout


@pytest.mark.parametrize("value, error", [
    (-1, ValueError), (2**51, ValueError), (math.nan, TypeError), (math.inf, TypeError), (1.5, TypeError),
    (1e9, TypeError), (True, TypeError), ("1e9", SettingError), ("-5", SettingError),
])
def test_set_memory_budget_refuses_what_is_not_a_byte_count(budget, value, error):
    with pytest.raises(error, match=re.escape("budget=") + re.escape(repr(value)) if error is not ValueError else "budget"):
        _store.set_memory_budget(value)


@pytest.mark.parametrize("value, expected", [(16 << 20, 16 << 20), ("64MiB", 64 << 20)])
def test_set_memory_budget_takes_bytes_or_a_byte_size(budget, value, expected):
    _store.set_memory_budget(value)
    assert _store.memory_budget() == expected


def test_set_cache_size_is_deprecated_for_the_budget(budget):
    from contextembed.sklearn import set_cache_size

    with pytest.warns(FutureWarning, match="set_memory_budget"):
        set_cache_size("64MiB")
    assert _store.memory_budget() == 64 << 20


# -- torchrun's variables ----------------------------------------------------------------------


@pytest.mark.parametrize("environment, message", [
    ({"WORLD_SIZE": "two"}, "WORLD_SIZE='two': expected a positive whole number"),
    ({"WORLD_SIZE": "0"}, "WORLD_SIZE='0': expected a positive whole number"),
    ({"WORLD_SIZE": "2", "RANK": "2"}, "RANK='2': expected a whole number from 0 to 1"),
    ({"WORLD_SIZE": "2", "RANK": "-1"}, "RANK='-1': expected a whole number from 0 to 1"),
    ({"WORLD_SIZE": "2"}, "WORLD_SIZE=2 but RANK is unset"),
    ({"WORLD_SIZE": "2", "RANK": "1", "LOCAL_RANK": "٣"}, "LOCAL_RANK='٣': expected a whole number >= 0"),
])
def test_bad_torchrun_variables_name_the_variable(monkeypatch, environment, message):
    for name in ("WORLD_SIZE", "RANK", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(SettingError, match=re.escape(message)):
        world_from_env()


def test_torchrun_variables_are_read(monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert world_from_env() == (3, 4, 1)
    monkeypatch.delenv("WORLD_SIZE")
    assert world_from_env() == (0, 1, 0)


# -- one place -----------------------------------------------------------------------------------

#: variables read elsewhere on purpose: Ray's own, read the way Ray reads them
ELSEWHERE = {("engines/_ray_cluster.py", "RAY_USE_TLS"), ("engines/_ray_cluster.py", "RAY_ADDRESS")}
_READ = re.compile(r"""os\.(?:environ\.get\(|getenv\(|environ\[(?![^\]]*\]\s*=[^=]))\s*["']?([A-Z_]*)""")


def test_environment_variables_are_read_in_settings_only():
    package = REPO_ROOT / "contextembed"
    reads = {
        (path.relative_to(package).as_posix(), name)
        for path in package.rglob("*.py") if path != package / "settings.py"
        for name in _READ.findall(path.read_text(encoding="utf-8"))
    }
    assert reads <= ELSEWHERE, f"read outside contextembed/settings.py: {sorted(reads - ELSEWHERE)}"


def test_a_directory_setting_is_an_existing_directory_or_an_error_naming_it(tmp_path, monkeypatch):
    """``CONTEXTEMBED_DATA`` (the examples' corpora): unset or blank is None; a missing path or a
    file is a SettingError naming the variable and the path."""
    monkeypatch.delenv(settings.DATA_ENV, raising=False)
    assert settings.data_directory() is None
    monkeypatch.setenv(settings.DATA_ENV, "  ")
    assert settings.data_directory() is None
    monkeypatch.setenv(settings.DATA_ENV, f" {tmp_path} ")
    assert settings.data_directory() == tmp_path
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv(settings.DATA_ENV, "~")
    assert settings.data_directory() == tmp_path
    monkeypatch.setenv(settings.DATA_ENV, str(tmp_path / "missing"))
    with pytest.raises(SettingError, match=rf"CONTEXTEMBED_DATA=.*missing.* does not exist; set it to an existing "):
        settings.data_directory()
    (tmp_path / "file").write_text("x")
    monkeypatch.setenv(settings.DATA_ENV, str(tmp_path / "file"))
    with pytest.raises(SettingError, match=r"CONTEXTEMBED_DATA=.*file.* is not a directory"):
        settings.data_directory()
