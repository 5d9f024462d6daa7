"""The episode table keeps every column of a stream's records, in first-seen order, also when the
records do not all have the first one's keys (the usual stream's do, and is checked with one union);
events whose texts are remembered are written as the encoder writes them."""

import json

from analysis.streamlog import encoding
from analysis.streamlog.encoding import episodes_table


def test_records_with_other_keys_give_every_column_in_first_seen_order():
    records = [{"a": 1, "b": "x"}, {"b": "y", "c": True}, {"a": 2}]
    table = episodes_table(records)
    assert table.column_names == ["a", "b", "c"]
    assert table.to_pydict() == {"a": [1, None, 2], "b": ["x", "y", None], "c": [None, True, None]}


def test_records_with_the_first_ones_keys_in_another_order_keep_the_first_ones_order():
    table = episodes_table([{"a": 1, "b": "x"}, {"b": "y", "a": 2}])
    assert table.to_pydict() == {"a": [1, 2], "b": ["x", "y"]}


def test_event_texts_remembered_are_written_as_the_encoder_writes_them():
    events = [
        {"t": i, "event": "created", "reason": f'why "{i % 5}"\n', "id": i, "key": "k", "value": "v\u2028",
         "s": 1, "f": 0, "state": ("hypothesis", "active")[i % 2]}
        for i in range(20)
    ]  # fmt: skip
    lines = [json.dumps(e, ensure_ascii=False, separators=(",", ":")) + "\n" for e in events]
    assert encoding.jsonl_bytes(events) == "".join(lines).encode()
