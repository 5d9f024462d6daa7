import pickle
import sqlite3
import threading

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from runners.llm.response_cache import CachedReply, ResponseCache, cache_key

MESSAGES = ({"role": "system", "content": "You choose."}, {"role": "user", "content": "Task 3: A, B or C?"})
PARAMS = {"temperature": 0.0, "max_tokens": 64, "top_p": None, "seed": 0, "scoring": "text"}


def test_key_is_stable_and_ignores_dict_order():
    reordered = [{"content": m["content"], "role": m["role"]} for m in MESSAGES]
    assert cache_key("m", MESSAGES, PARAMS) == cache_key("m", reordered, dict(reversed(PARAMS.items())))
    assert len(cache_key("m", MESSAGES, PARAMS)) == 64


@settings(max_examples=50, deadline=None)
@given(
    field=st.sampled_from(sorted(PARAMS)),
    value=st.one_of(st.integers(1, 10**6), st.floats(0.01, 2.0), st.text(min_size=1, max_size=5)),
)
def test_key_changes_with_any_generation_parameter(field, value):
    assume(value != PARAMS[field])
    changed = {**PARAMS, field: value}
    assert cache_key("m", MESSAGES, changed) != cache_key("m", MESSAGES, PARAMS)


def test_key_changes_with_model_and_messages():
    base = cache_key("m", MESSAGES, PARAMS)
    assert cache_key("other", MESSAGES, PARAMS) != base
    assert cache_key("m", MESSAGES[:1], PARAMS) != base
    assert cache_key("m", (*MESSAGES[:1], {"role": "user", "content": "Task 4"}), PARAMS) != base


def test_roundtrip_counts_and_persists(tmp_path):
    path = tmp_path / "cache" / "replies.sqlite"
    cache = ResponseCache(path)
    assert cache.get("k") is None
    cache.put("k", "m", "Answer: B", 12, 3)
    assert cache.get("k") == CachedReply("Answer: B", 12, 3)
    assert cache.stats() == {"cache_hits": 1, "cache_misses": 1}
    cache.close()
    reopened = ResponseCache(path)
    assert reopened.get("k") == CachedReply("Answer: B", 12, 3) and len(reopened) == 1
    assert sqlite3.connect(path).execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_pickled_cache_reopens_its_file(tmp_path):
    cache = ResponseCache(tmp_path / "c.sqlite")
    cache.put("k", "m", "x", 1, 1)
    clone = pickle.loads(pickle.dumps(cache))
    assert clone.get("k") == CachedReply("x", 1, 1)


def test_concurrent_writers_and_readers_share_one_file(tmp_path):
    path = tmp_path / "c.sqlite"
    caches = [ResponseCache(path), ResponseCache(path)]  # two handles, as two processes of a multirun
    errors = []

    def work(worker: int) -> None:
        cache = caches[worker % 2]
        try:
            for i in range(50):
                key = f"{worker}-{i}"
                cache.put(key, "m", f"text {key}", i, 1)
                assert cache.get(key) == CachedReply(f"text {key}", i, 1)
        except Exception as exc:  # surfaced below: a thread's assertion would otherwise be lost
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(w,)) for w in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert len(caches[0]) == 400
    assert caches[0].hits + caches[1].hits == 400 and caches[0].misses + caches[1].misses == 0
