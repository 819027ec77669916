"""``lightning_order.data.text.split``: the split by a hash of the key."""

from __future__ import annotations

import numpy as np

from lightning_order.data.engine.keys import is_val, key_hashes


def test_split_is_a_function_of_the_key():
    keys = [f"text {i % 50}" for i in range(1000)]
    flags = is_val(keys, 0.2, seed=0)
    by_key = {}
    for key, flag in zip(keys, flags):
        assert by_key.setdefault(key, flag) == flag
    more = is_val([*keys, "new row"], 0.2, seed=0)
    assert (more[:-1] == flags).all()  # adding rows never moves existing ones
    assert (is_val(keys, 0.2, seed=1) != flags).any()


def test_split_fraction_and_key_hash():
    keys = [str(i) for i in range(20000)]
    assert abs(is_val(keys, 0.1, 0).mean() - 0.1) < 0.01
    hashes = key_hashes(keys[:3])
    assert hashes.dtype == np.int64 and len(set(hashes.tolist())) == 3
    assert (key_hashes(["a"]) == key_hashes(["a"])).all()


def test_text_keys_ignore_punctuation_so_near_duplicates_share_a_split():
    from lightning_order.data.engine.keys import text_key

    a, b = "the match & the goal!", 'the match the "goal"'
    assert text_key(a) == text_key(b) == "the match the goal"
    flags = is_val([a, b] * 200, 0.5, seed=3, text=True)
    assert len(set(flags[0::2].tolist())) == 1 and (flags[0::2] == flags[1::2]).all()
    assert (key_hashes([a], text=True) == key_hashes([b], text=True)).all()
    assert (key_hashes([a]) != key_hashes([b])).all()  # a group key is taken as it is
