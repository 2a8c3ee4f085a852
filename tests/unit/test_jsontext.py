"""model/jsontext.py: orjson's speed, json's results, including where the two differ."""
from __future__ import annotations

import json
import math
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from queuelog.model import jsontext
from queuelog.server.requests.parse import decode

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text()
    | st.floats(allow_nan=False, allow_infinity=False),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20)


def same(a: Any, b: Any) -> bool:
    """Equal, and of the same types all the way down (1 is not 1.0 here)."""
    if isinstance(a, float) and isinstance(b, float):
        return a == b and math.copysign(1, a) == math.copysign(1, b)
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return bool(a == b)


@settings(max_examples=300, deadline=None)
@given(JSON)
def test_text_written_and_read_is_what_json_writes_and_reads(value: Any) -> None:
    text = jsontext.dumps(value)
    assert same(json.loads(text), value)
    assert same(jsontext.loads(text), json.loads(text))
    assert same(jsontext.loads(json.dumps(value)), value)
    assert same(decode(text.encode("utf-8"))[0], json.loads(text))


def test_integers_past_64_bits_stay_exact_both_ways() -> None:
    big = 123456789012345678901234567890
    assert jsontext.dumps({"n": big}) == '{"n":123456789012345678901234567890}'
    assert jsontext.loads('{"n": 123456789012345678901234567890}') == {"n": big}
    assert jsontext.loads(b"[18446744073709551616]") == [2**64]
    assert decode(b'{"n": 123456789012345678901234567890}')[0] == {"n": big}


def test_text_is_compact_utf8_in_key_order() -> None:
    assert jsontext.dumps({"b": "é", "a": [1, 2.5]}) == '{"b":"é","a":[1,2.5]}'
    assert jsontext.dumps_bytes({1: True}) == b'{"1":true}'
