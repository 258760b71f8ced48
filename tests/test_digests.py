"""The content digests statements and the cache are made of (`sweeper.results.digests`): their
values are a format, since every signed file on storage carries them. Pinned here as the code
of 2026-11 computed them."""

from __future__ import annotations

import pyarrow as pa

from sweeper.results.digests import column_digests

# Computed by the implementation before its no-null shortcut (d114d60), which must not move them.
PINNED = {
    "i": "40fb7c783d5de6f8c31eb3d333412dbb6d9c0da57aa8b0bc25bfc970a4dacff8",
    "n": "7b0dccf43d58a6621cb7eaa3d15ace8335777ade094efc46eaf9e84d2d42d8c9",
    "x": "d7c407f1e05f66273d045abe6547f90a9168add879263cd65105120109614bd3",
    "b": "f3d67879889d48c4a47e0fb0d767898cc15a6b00a7df75769a1a4b32b46cd37c",
    "s": "49ce77ff3d223a8e459a97d24f67d94436c097335b6c487beb3ed65ff65fbae0",
    "k": "af727b8e552ace70869756fb3491ee5802a6abecc3d9a04abc97afc3f0161a69",
}


def table(chunked: bool = True) -> pa.Table:
    ints = [[1, 2], [3, None, 5]] if chunked else [[1, 2, 3, None, 5]]
    strings = [["a", None], ["b", "a", "é"]] if chunked else [["a", None, "b", "a", "é"]]
    return pa.table(
        {
            "i": pa.chunked_array(ints, pa.int64()),
            "n": pa.array([None] * 5, pa.int64()),
            "x": pa.array([0.5, -1.25, 3.0, 1e300, 0.0]),
            "b": pa.array([True, None, False, True, True]),
            "s": pa.chunked_array(strings),
            "k": pa.array(["same"] * 5),
        }
    )


def test_column_digests_are_the_pinned_ones_however_the_rows_are_chunked():
    assert column_digests(table()) == PINNED
    assert column_digests(table(chunked=False)) == PINNED


def test_a_null_a_value_and_a_column_s_type_each_change_its_digest():
    t = table()
    nulled = t.set_column(2, "x", pa.array([0.5, None, 3.0, 1e300, 0.0]))
    zeroed = t.set_column(1, "n", pa.array([0, 0, 0, 0, 0], pa.int64()))  # a null is not its fill
    false = t.set_column(3, "b", pa.array([True, False, False, True, True]))
    typed = t.set_column(0, "i", pa.chunked_array([[1, 2, 3, None, 5]], pa.int32()))
    assert column_digests(nulled)["x"] != PINNED["x"]
    assert column_digests(zeroed)["n"] != PINNED["n"]
    assert column_digests(false)["b"] != PINNED["b"]
    assert column_digests(typed)["i"] != PINNED["i"]
