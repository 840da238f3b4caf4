"""SlotTable: which slot each row is in, and each slot's masks, length and input, as the rows
join, leave, repeat and are rehoused."""

from __future__ import annotations

import numpy as np

from service.runtime.rows.table import (
    IDLE_STEPS,
    MIN_TRIM,
    NewRows,
    SlotTable,
    extent,
    row_extents,
    trim,
)


def new_rows(lengths: list[int], inputs: list[int], width: int | None = None) -> NewRows:
    """Rows whose memory masks have `lengths` real positions, of `width` columns."""
    width = max(lengths) if width is None else width
    mask = np.zeros((len(lengths), width), np.int64)
    for i, n in enumerate(lengths):
        mask[i, :n] = 1
    return NewRows({}, mask, {}, np.array(inputs, np.int64))


def test_trim_extent_and_row_extents_read_the_columns_rows_use():
    mask = np.array([[0, 1, 1, 0, 0], [0, 0, 1, 0, 0]])
    assert trim(mask, leading=True) == 1 and trim(mask, leading=False) == 2
    assert extent(mask) == 3
    assert row_extents(mask).tolist() == [3, 3]
    assert row_extents(np.array([[1, 0, 1, 0], [0, 0, 0, 0]])).tolist() == [3, 0]
    empty = np.zeros((2, 4), np.int64)
    assert trim(empty, leading=True) == trim(empty, leading=False) == 4 and extent(empty) == 0


def test_an_empty_table_adopts_rows_in_their_own_slots():
    table = SlotTable()
    assert (table.rows, table.slots, table.cache_length, table.memory_length) == (0, 0, 0, 0)
    new = new_rows([3, 5], [0, 1])
    assert len(new) == 2
    table.adopt(new)
    assert (table.rows, table.slots, table.memory_length) == (2, 2, 5)
    assert table.identity and table.extents.tolist() == [3, 5]
    tokens = np.array([[7], [8]])
    fed, positions = table.fed(tokens)
    assert fed is tokens and positions.tolist() == [[0], [0]]
    table.extend_self_mask(1)
    table.stepped(1)
    assert table.cache_length == 1 and table.lengths.tolist() == [1, 1]
    assert table.fed(tokens)[1].tolist() == [[1], [1]]


def test_a_dead_slot_is_fed_padding_at_position_zero_and_counted_idle():
    table = SlotTable()
    table.adopt(new_rows([2, 2, 2], [0, 1, 2]))
    table.stepped(4)
    table.set_alive(np.array([0, 2]))  # row of slot 1 left
    assert not table.identity and table.dead().tolist() == [False, True, False]
    assert table.free().tolist() == [1]
    assert table.rows_left() and not table.rows_left()  # the look clears it
    fed, positions = table.fed(np.array([[5], [6]]))
    assert fed.tolist() == [[5], [0], [6]] and positions.tolist() == [[4], [0], [4]]
    assert table.idle.tolist() == [0, 1, 0]


def test_rows_written_into_dead_slots_take_fresh_masks_and_lengths():
    table = SlotTable()
    table.adopt(new_rows([4, 4, 4], [0, 1, 2]))
    table.extend_self_mask(3)
    table.stepped(3)
    table.set_alive(np.array([0, 2]))
    table.write(np.array([1]), new_rows([2], [9], width=2))
    assert table.alive.tolist() == [0, 2, 1] and table.inputs.tolist() == [0, 9, 2]
    assert table.memory_mask[1].tolist() == [1, 1, 0, 0]  # the old row's columns cleared
    assert table.self_mask[1].tolist() == [0, 0, 0] and table.lengths.tolist() == [3, 0, 3]
    assert table.extents.tolist() == [4, 2, 4]


def test_reordering_without_repeats_only_changes_the_index():
    table = SlotTable()
    table.adopt(new_rows([1, 1, 1], [0, 1, 2]))
    assert table.reorder_free(np.array([0, 1, 2])) and table.identity
    assert table.reorder_free(np.array([2, 0])) and not table.identity
    assert table.alive.tolist() == [2, 0] and table.rows_left()
    assert not table.reorder_free(np.array([0, 0]))  # a repeat: nothing done
    assert table.alive.tolist() == [2, 0]


def test_a_copy_moves_the_memory_mask_only_between_inputs():
    table = SlotTable()
    table.adopt(new_rows([2, 3, 4, 1], [0, 0, 1, 1]))
    table.extend_self_mask(2)
    table.lengths = np.array([2, 5, 7, 1])
    other = table.copy(np.array([0, 2]), np.array([1, 3]))
    assert other.tolist() == [False, False]  # beams of one input share their memory
    table.memory_mask[3] = 0
    other = table.copy(np.array([0]), np.array([3]))
    assert other.tolist() == [True] and table.memory_mask[3].tolist() == [1, 1, 0, 0]
    assert table.lengths.tolist() == [2, 2, 7, 2] and table.inputs.tolist() == [0, 0, 1, 0]


def test_compact_moves_live_rows_to_the_first_slots_and_appends_new_ones():
    table = SlotTable()
    table.adopt(new_rows([2, 6, 3], [0, 1, 2]))
    table.extend_self_mask(4)
    table.self_mask[:, :2] = 0  # two leading columns no row uses
    table.stepped(4)
    table.set_alive(np.array([2, 0]))
    lead, tail = table.padding()
    assert (lead, tail) == (2, 3)  # the longest live memory is 3 of 6
    assert table.used_memory() == 3
    table.compact(lead, table.memory_length - tail, new_rows([5], [7]))
    assert table.identity and table.alive.tolist() == [0, 1, 2]
    assert table.inputs.tolist() == [2, 0, 7] and table.lengths.tolist() == [4, 4, 0]
    assert table.memory_mask.shape == (3, 5) and table.extents.tolist() == [3, 2, 5]
    assert table.self_mask.shape == (3, 2) and table.self_mask[2].tolist() == [0, 0]


def test_rehouse_keeps_slots_or_moves_rows_into_a_bucket():
    table = SlotTable()
    table.adopt(new_rows([3, 2, 5, 1], [0, 1, 2, 3]))
    table.stepped(2)
    table.set_alive(np.array([1, 3]))
    table.rehouse(table.alive, table.alive, 4, 8, keep_slots=True)
    assert table.memory_mask.shape == (4, 8) and table.alive.tolist() == [1, 3]
    assert table.memory_mask[0].tolist() == [1] + [0] * 7  # a free slot attends to position 0
    assert table.lengths.tolist() == [2, 2, 2, 2]
    table.rehouse(np.array([3, 1]), np.arange(2), 2, 2, keep_slots=False)
    assert table.slots == 2 and table.identity and table.alive.tolist() == [0, 1]
    assert table.inputs.tolist() == [3, 1] and table.memory_mask.tolist() == [[1, 0], [1, 1]]
    assert table.extents.tolist() == [1, 2] and table.cache_length == 0


def test_compacting_is_worth_it_for_many_or_idle_dead_slots_or_piled_padding():
    table = SlotTable()
    table.adopt(new_rows([4] * 4, [0, 1, 2, 3]))
    assert not table.worth_compacting(growing=True)
    table.set_alive(np.array([0, 1, 2]))
    table.rows_left()
    assert not table.worth_compacting(growing=True)  # one dead slot of four, not idle
    table.idle[3] = IDLE_STEPS
    assert table.worth_compacting(growing=True)
    table = SlotTable()
    table.adopt(new_rows([4] * 4, [0, 1, 2, 3]))
    table.set_alive(np.array([0, 1]))
    assert table.worth_compacting(growing=True)  # half the slots dead
    # padding columns piled up once rows left (one dead slot of three, not idle)

    def leaving(lengths: list[int]) -> SlotTable:
        table = SlotTable()
        table.adopt(new_rows(lengths, [0, 1, 2]))
        table.extend_self_mask(2 * MIN_TRIM)
        table.self_mask[:, :MIN_TRIM] = 0  # columns no row attends to
        return table

    table = leaving([2, 2, 40])
    assert not table.worth_compacting(growing=True)  # no row left: no look
    table.set_alive(np.array([0, 1]))  # the long row leaves
    assert table.worth_compacting(growing=True)  # a growing state's leading columns
    table = leaving([2, 2, 40])
    table.set_alive(np.array([0, 1]))
    assert table.worth_compacting(growing=False)  # 38 memory columns no live row uses
    assert table.cache_length == MIN_TRIM  # without a growing state: dropped at once
    table = leaving([2, 3, 4])
    table.set_alive(np.array([0, 1]))
    assert not table.worth_compacting(growing=False)  # one memory column: not worth it
    assert table.cache_length == MIN_TRIM
