"""How a stream's log is encoded: bytes as a deterministic function of the values (the JSON text of a
line, `episodes.parquet`, `archive.jsonl`) and the hashes of what decides a stream (`fingerprint`). The
writer (`analysis.streamlog.stream`) and every reader use these, so a record replayed from the partial log
and a fresh one give the same bytes.
"""

from __future__ import annotations

import functools
import hashlib
import json
import operator
from collections.abc import Iterable, Mapping, Sequence
from json.encoder import c_encode_basestring, c_make_encoder  # type: ignore[attr-defined]
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from analysis.streamlog.events import FIELDS as EVENT_FIELDS
from analysis.streamlog.record import SAMPLE

#: zstd level and page size of the logged-sample columns in episodes.parquet (see `parquet_bytes`).
SAMPLE_LEVEL = 9


SAMPLE_PAGE_BYTES = 1 << 24


_UNIQUE_TEXT = frozenset({"evidence", "prompt"})


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def fingerprint(config: Mapping[str, Any]) -> str:
    """A short, stable hash of what determines a stream's episodes."""
    return hashlib.sha256(dumps(config, sort_keys=True).encode()).hexdigest()[:16]


def episodes_table(records: Sequence[Mapping[str, Any]]) -> pa.Table:
    """The episodes as an Arrow table: columns in first-seen order, values as JSON would carry them
    (so a record replayed from the partial log and a fresh one give the same table). Only values that
    are not already JSON's own (str, int, float, bool, None) take the JSON round trip: episodes carry
    plain values, and the round trip per record was most of the cost of writing a stream."""
    columns = dict.fromkeys(records[0]) if records else {}
    if len(set().union(*records)) > len(columns):  # the usual stream's records all have the first's keys
        for record in records:
            columns.update(dict.fromkeys(record))
    table = {}
    for name in columns:
        key = name if type(name) is str else json.loads(dumps({name: 0})).popitem()[0]
        try:
            values = list(map(operator.itemgetter(name), records))
        except KeyError:
            values = [record.get(name) for record in records]
        if not _PLAIN_TYPES.issuperset(map(type, values)):
            values = [v if type(v) in _PLAIN_TYPES else json.loads(dumps(v)) for v in values]
        table[key] = values
    return pa.table(table)


def parquet_bytes(records: Sequence[Mapping[str, Any]]) -> bytes:
    """`episodes.parquet`'s bytes: a deterministic function of the records.

    The logged-sample columns (`record.SAMPLE`) are compressed at zstd level SAMPLE_LEVEL, and
    `evidence` and `prompt`, whose values rarely repeat whole, are written without a dictionary and in
    one page: the long runs of text a row shares with an earlier one (Append-Only's prompts hold every
    observation of a key) then compress to about half of what the defaults give, in about the same
    time. The other columns keep the defaults, so their bytes are what they were before the sample."""
    table = episodes_table(records)
    names = table.column_names
    sink = pa.BufferOutputStream()
    pq.write_table(
        table,
        sink,
        compression="zstd",
        compression_level={name: SAMPLE_LEVEL for name in SAMPLE if name in names} or None,
        use_dictionary=[name for name in names if name not in _UNIQUE_TEXT],
        data_page_size=SAMPLE_PAGE_BYTES,
    )
    return sink.getvalue().to_pybytes()


def jsonl_bytes(rows: Iterable[Mapping[str, Any]]) -> bytes:
    """One JSON line per row, as `dumps` writes it."""
    return "".join(map(_line, rows)).encode()


def _line(row: Mapping[str, Any]) -> str:
    """A row's JSON line. A lifecycle event (`analysis.streamlog.events.FIELDS`: those fields, in that order,
    of exactly those types) is written from a template that gives the encoder's text at about half its
    cost (its name, reason and state encoded once per text, `_encoded`): a fact-heavy stream logs tens
    of thousands of events. Any other row goes through the encoder."""
    if tuple(row) == _EVENT_FIELDS and tuple(map(type, row.values())) == _EVENT_TYPES:
        t, event, reason, id_, key, value, s, f, state = row.values()
        enc, known = c_encode_basestring, _encoded
        return (
            f'{{"t":{t},"event":{known(event)},"reason":{known(reason)},"id":{id_},"key":{enc(key)},'
            f'"value":{enc(value)},"s":{s},"f":{f},"state":{known(state)}}}\n'
        )
    return dumps(row) + "\n"


#: A text as the encoder writes it, remembered: an event's name, state and reason repeat across a
#: stream's events (a fact stream's thousands of promotions share a handful of reasons).
_encoded = functools.lru_cache(maxsize=4096)(c_encode_basestring)


def dumps(obj: Any, sort_keys: bool = False) -> str:
    if sort_keys:
        return _SORTED.encode(obj)
    if _plain_chunks is None or isinstance(obj, str):
        return _PLAIN.encode(obj)
    return "".join(_plain_chunks(obj, 0))


def _jsonable(obj: Any) -> Any:
    """numpy scalars, tuples-as-keys and the like: their plain Python form, else their str."""
    item = getattr(obj, "item", None)
    if callable(item):
        return item()
    if isinstance(obj, (set, frozenset)):
        return sorted(obj, key=str)
    return str(obj)


# One encoder each, built once: json.dumps with options builds a new encoder per call, which dominated
# writing the archive of fact-heavy streams.
_PLAIN = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), default=_jsonable)


_SORTED = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), default=_jsonable, sort_keys=True)


# `_PLAIN.encode` builds its C encoder anew on every call; this one is built once and gives the same text
# (it skips the check for circular references: records are trees). None where the C encoder is missing.
_plain_chunks = (
    c_make_encoder(None, _jsonable, c_encode_basestring, None, ":", ",", False, False, True)
    if c_make_encoder is not None and c_encode_basestring is not None
    else None
)


_PLAIN_TYPES = frozenset({str, int, float, bool, type(None)})


_EVENT_FIELDS, _EVENT_TYPES = tuple(EVENT_FIELDS), tuple(EVENT_FIELDS.values())
