"""The one planner of every transformer path (``_plan.Plan``) against plain loops: each row's model
input, the pieces each row owns, the run order and the [CLS] rows, for windows, document context and
pairs; the one builder of padded inputs."""

import numpy as np
import pytest

from contextembed._inputs.alignment import PairTemplate, plan_windows, split_context
from contextembed.encoders.transformer._plan import ChunkPieces, Plan, Units, batches, padded_inputs, pair_windows

PREFIX, SUFFIX = np.array([101]), np.array([102])
AROUND = (PREFIX, SUFFIX)


def _chunk(rng, n_texts: int, longest: int) -> ChunkPieces:
    """Texts of random words of 1 to 3 pieces each (some texts empty), ids from 1000 up, all distinct."""
    n_words = rng.integers(0, longest, size=n_texts)
    per_word = rng.integers(1, 4, size=int(n_words.sum()))
    starts = np.concatenate([[0], np.cumsum(per_word)]).astype(np.int64)
    first_word = (np.cumsum(n_words) - n_words).astype(np.int64)
    return ChunkPieces(1000 + np.arange(starts[-1], dtype=np.int64), starts, first_word, n_words.astype(np.int64))


def _rows(plan: Plan) -> list[list[int]]:
    return [plan.row_ids(slice(r, r + 1))[0].tolist() for r in range(len(plan))]


def _all_ids(plan: Plan) -> np.ndarray:
    """Every row's ids end to end, as ``plan.row_start`` counts them."""
    ids, _ = plan.row_ids(slice(0, len(plan)))
    assert len(ids) == plan.row_start[-1]
    return ids


def _in_run_order(planned: list[list[int]]) -> list[list[int]]:
    """Rows in the order they were planned, sorted by length, stably: the run order."""
    return sorted(planned, key=len)


def _owned(plan: Plan, chunk: ChunkPieces) -> list[list[int]]:
    """Per text, the ids its parts deliver (read from the rows at the parts' positions), in piece order."""
    got = [[] for _ in range(len(chunk))]
    for p in np.argsort(plan.part_piece, kind="stable"):
        row = _all_ids(plan)[plan.row_start[plan.part_row[p]] :]
        start = plan.part_position[p]
        got[plan.part_item[p]].extend(row[start : start + plan.part_count[p]].tolist())
    return got


@pytest.mark.parametrize("window, stride", [(7, 3), (7, 7), (40, 20), (1, 1)])
def test_windows_are_the_plain_loops_rows_in_run_order(window, stride):
    rng = np.random.default_rng(window + stride)
    chunk = _chunk(rng, 30, 12)
    plan = Plan.windows(chunk.ids, chunk.n_pieces, AROUND, window, stride)
    planned, cls_of = [], []
    for text in range(len(chunk)):
        ids = chunk.text_ids(text)
        for w in plan_windows(len(ids), window, stride):
            planned.append(PREFIX.tolist() + ids[w.start : w.end].tolist() + SUFFIX.tolist())
            if w.start == 0:
                cls_of.append(planned[-1])
    assert _rows(plan) == _in_run_order(planned)
    assert _owned(plan, chunk) == [chunk.text_ids(t).tolist() for t in range(len(chunk))]  # every piece once
    assert np.all(np.diff(plan.part_row) >= 0) and plan.row_ids(slice(0, len(plan)))[1] is None
    assert [_rows(plan)[r] for r in plan.cls_row] == cls_of  # each text's first window
    assert np.all(plan.n_parts == [len(plan_windows(n, window, stride)) for n in chunk.n_pieces])


def test_without_special_tokens_no_text_has_a_cls_row():
    chunk = _chunk(np.random.default_rng(0), 5, 6)
    empty = np.zeros(0, dtype=np.int64)
    plan = Plan.windows(chunk.ids, chunk.n_pieces, (empty, empty), 4, 2)
    assert np.all(plan.cls_row == -1)
    assert _owned(plan, chunk) == [chunk.text_ids(t).tolist() for t in range(len(chunk))]


@pytest.mark.parametrize("window", [6, 12, 40])
def test_sentences_in_context_are_the_plain_loops_rows(window):
    rng = np.random.default_rng(window)
    chunk = _chunk(rng, 25, 8)
    n_before, n_after = rng.integers(0, 9, size=len(chunk)), rng.integers(0, 9, size=len(chunk))
    before = (5000 + np.arange(n_before.sum()), n_before)
    after = (9000 + np.arange(n_after.sum()), n_after)
    size = rng.integers(1, 6, size=len(chunk))
    plan = Plan.in_context(chunk.ids, chunk.n_pieces, before, after, size, AROUND, window, 3)
    planned = []
    b_start, a_start = np.cumsum(n_before) - n_before, np.cumsum(n_after) - n_after
    for text in range(len(chunk)):
        ids, room = chunk.text_ids(text).tolist(), window - int(chunk.n_pieces[text])
        if not ids or room <= 0:
            planned += [PREFIX.tolist() + ids[w.start : w.end] + SUFFIX.tolist() for w in plan_windows(len(ids), window, 3)]
            continue
        left = before[0][b_start[text] : b_start[text] + n_before[text]].tolist()
        right = after[0][a_start[text] : a_start[text] + n_after[text]].tolist()
        n_left, n_right = split_context(room, min(size[text], len(left)), min(size[text], len(right)))
        planned.append(PREFIX.tolist() + left[len(left) - n_left :] + ids + right[:n_right] + SUFFIX.tolist())
    assert _rows(plan) == _in_run_order(planned)
    assert _owned(plan, chunk) == [chunk.text_ids(t).tolist() for t in range(len(chunk))]
    assert any(piece >= 5000 for row in _rows(plan) for piece in row)  # context was added


@pytest.mark.parametrize("budget", [6, 11, 60])
def test_pairs_are_the_plain_loops_rows_with_their_segment_ids(budget):
    rng = np.random.default_rng(budget)
    firsts, seconds = _chunk(rng, 12, 9), _chunk(rng, 12, 9)
    sides = firsts.then(seconds)
    template = PairTemplate((7,), (8, 8), (9,), (0, 0, 0, 1, 1))
    plan = Plan.pairs(sides, template, budget, takes_types=True)
    planned = []
    for pair in range(12):
        a, b = firsts.text_ids(pair), seconds.text_ids(pair)
        windows_a, windows_b = pair_windows(len(a), len(b), budget)
        for wa, wb in [(windows_a[0], windows_b[0])] + [(w, windows_b[0]) for w in windows_a[1:]] + [
                (windows_a[0], w) for w in windows_b[1:]]:
            first, second = a[wa.start : wa.end], b[wb.start : wb.end]
            planned.append((template.ids(first, second).tolist(), template.type_ids(len(first), len(second)).tolist()))
    planned = sorted(planned, key=lambda row: len(row[0]))
    assert _rows(plan) == [ids for ids, _ in planned]
    types = [plan.row_ids(slice(r, r + 1))[1].tolist() for r in range(len(plan))]
    assert types == [t for _, t in planned]
    assert _owned(plan, sides) == [sides.text_ids(t).tolist() for t in range(len(sides))]
    assert np.array_equal(plan.cls_row[:12], plan.cls_row[12:])  # both sides: the pair's first row
    untyped = Plan.pairs(sides, template, budget, takes_types=False)
    assert untyped.row_ids(slice(0, len(untyped)))[1] is None  # the model's default


def test_sides_of_pairs_are_the_first_sides_then_the_second():
    rng = np.random.default_rng(3)
    firsts, seconds = _chunk(rng, 4, 5), _chunk(rng, 4, 5)
    sides = firsts.then(seconds)
    assert len(sides) == 8
    for text in range(4):
        assert np.array_equal(sides.text_ids(text), firsts.text_ids(text))
        assert np.array_equal(sides.text_ids(4 + text), seconds.text_ids(text))
        assert np.array_equal(sides.offsets(4 + text), seconds.offsets(text))


@pytest.mark.parametrize("selector", ["all", "starts", "ends"])
def test_units_point_at_their_pieces_in_the_rows_that_own_them(selector):
    rng = np.random.default_rng(1)
    chunk = _chunk(rng, 20, 14)
    plan = Plan.windows(chunk.ids, chunk.n_pieces, AROUND, 7, 3)
    pieces = {"all": np.arange(len(chunk.ids)), "starts": chunk.starts[:-1], "ends": chunk.starts[1:] - 1}[selector]
    units = Units.of(plan, pieces)
    assert np.array_equal(_all_ids(plan)[plan.row_start[units.row] + units.position], chunk.ids[pieces[units.dest]])
    assert sorted(units.dest.tolist()) == list(range(len(pieces)))
    assert np.all(np.diff(units.row) >= 0)
    assert np.array_equal(units.row_units, np.searchsorted(units.row, np.arange(len(plan) + 1)))
    index, dest = units.batch_index(slice(2, 9), 16)  # rows 2..8 of a batch padded to 16
    inside = (units.row >= 2) & (units.row < 9)
    assert np.array_equal(index, (units.row[inside] - 2) * 16 + units.position[inside])
    assert np.array_equal(dest, units.dest[inside])


def test_padded_inputs_are_a_plain_loops():
    rows = [[5, 6, 7], [], [8], [9, 10, 11, 12]]
    types = [[0, 0, 1], [], [1], [0, 1, 1, 1]]
    got = padded_inputs(np.array(sum(rows, []), dtype=np.int64), np.array([len(r) for r in rows]), 6, 0,
                        np.array(sum(types, []), dtype=np.int64))
    for r, (ids, kinds) in enumerate(zip(rows, types)):
        assert got["input_ids"][r].tolist() == ids + [0] * (6 - len(ids))
        assert got["attention_mask"][r].tolist() == [1] * len(ids) + [0] * (6 - len(ids))
        assert got["token_type_ids"][r].tolist() == kinds + [0] * (6 - len(kinds))
    assert list(got) == ["input_ids", "attention_mask", "token_type_ids"]
    assert all(array.dtype == np.int64 for array in got.values())
    assert list(padded_inputs(np.zeros(0, dtype=np.int64), np.array([0]), 2, 1)) == ["input_ids", "attention_mask"]


def test_a_plan_holds_a_few_numbers_per_row_not_its_ids():
    """A long sentence in windows of stride 1 makes about as many rows as it has pieces, each a
    window long: the plan keeps their segments (the ids are built batch by batch), so its memory
    grows with the rows, not with rows x window."""
    chunk = ChunkPieces(np.arange(4000, dtype=np.int64), np.arange(4001, dtype=np.int64), np.array([0]), np.array([4000]))
    plan = Plan.windows(chunk.ids, chunk.n_pieces, AROUND, 512, 1)
    held = sum(getattr(plan, name).nbytes for name in plan.__dataclass_fields__ if isinstance(getattr(plan, name), np.ndarray))
    assert len(plan) > 3000 and plan.row_start[-1] > 1_500_000  # the rows' ids: 1.8 M positions
    assert held < 300 * len(plan) + 2 * chunk.ids.nbytes  # a few numbers per row, and the pieces
    assert plan.row_ids(slice(7, 8))[0].tolist() == [101, *range(7, 519), 102]
    inputs = plan.inputs(slice(0, 3), 514, 0)
    assert inputs["input_ids"].shape == (3, 514) and inputs["attention_mask"].all()


def test_batches_keep_the_padded_budget_and_the_batch_size():
    sizes = [3, 3, 5, 8, 8, 8, 16, 16]
    got = list(batches(range(len(sizes)), sizes.__getitem__, 24, 3))
    assert [i for batch in got for i in batch] == list(range(len(sizes)))  # in order, none left out
    assert all(len(batch) <= 3 and max(sizes[i] for i in batch) * len(batch) <= 24 for batch in got)
    assert got == [[0, 1, 2], [3, 4, 5], [6], [7]]
    assert list(batches([], len, 10, 2)) == []
