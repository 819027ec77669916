"""``lightning_order.data.text.cleaning``: text cleaning, row by row."""

from __future__ import annotations

import pytest

from lightning_order.data.text.cleaning import clean_batch
from lightning_order.data.text.normalise import clean_text
from lightning_order.errors import DataError


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("<b>Hello</b> world", "hello world"),
        ("rock &amp; roll", "rock & roll"),
        ("a&nbsp;b", "a b"),
        ("&lt;br&gt;line", "line"),
        ("ｆｕｌｌ width", "full width"),
        ("ﬁne ﬂow", "fine flow"),
        ("##ing and ##ed", "ing and ed"),
        ("wow!!! really??", "wow! really?"),
        ("so.... what,,", "so. what,"),
        ("mixed!?!? end", "mixed! end"),
        ("  many \t\n spaces\u00a0here ", "many spaces here"),
        ("<div class='x'></div>", ""),
    ],
)
def test_clean_text(raw, expected):
    assert clean_text(raw) == expected


def test_clean_text_keeps_case_when_asked():
    assert clean_text("<i>Hello</i>  World!!", lowercase=False) == "Hello World!"


@pytest.mark.parametrize("bad", [None, 3, 2.5, b"bytes"])
def test_clean_batch_rejects_non_string_text(bad):
    with pytest.raises(DataError) as info:
        clean_batch({"text": ["fine", bad]}, "text")
    assert info.value.step == "clean" and info.value.column == "text"
