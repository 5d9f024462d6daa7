"""Which cache slot the local completions server evaluates a prompt in (runners.llm.local.llama_server):
a prompt goes where its shared prefix is longest when that is at least half of it, else to the least
recently used slot, so that a prompt sharing only the instructions never evicts another job's memory."""

from __future__ import annotations

import pytest

from runners.llm.local.llama_server import pick_slot

SYSTEM = [1, 2, 3]


def test_a_prompt_goes_to_the_slot_that_shares_the_longest_prefix():
    cached = [SYSTEM + [10, 11, 12, 13], SYSTEM + [20, 21, 22, 23]]
    assert pick_slot(cached, [1, 2], SYSTEM + [20, 21, 22, 99]) == 1
    assert pick_slot(cached, [2, 1], SYSTEM + [10, 11, 12, 13, 14]) == 0


def test_a_prompt_that_shares_only_the_instructions_takes_an_empty_slot_rather_than_evict_a_long_memory():
    memory = SYSTEM + list(range(100, 160))
    assert pick_slot([memory, []], [2, 0], SYSTEM + [7, 8, 9, 10]) == 1


def test_with_every_slot_full_a_prompt_sharing_little_evicts_the_least_recently_used_not_the_shortest():
    short, long_recent, long_old = (
        SYSTEM + [5],
        SYSTEM + list(range(100, 160)),
        SYSTEM + list(range(200, 260)),
    )
    assert pick_slot([short, long_recent, long_old], [9, 8, 3], SYSTEM + list(range(300, 310))) == 2


def test_among_slots_that_share_as_much_the_most_recently_used_keeps_serving():
    assert pick_slot([SYSTEM + [9], SYSTEM + [9]], [5, 4], SYSTEM + [9, 7]) == 0


@pytest.mark.parametrize("slots", [0, -1])
def test_a_server_needs_at_least_one_slot(slots, tmp_path):
    from runners.llm.local.llama_server import LoglikModel

    with pytest.raises(ValueError, match="slots: must be >= 1"):
        LoglikModel(tmp_path / "none.gguf", "m", 512, 1, swa_full=False, slots=slots)


def _model_without_llama(slots: int):
    """A LoglikModel whose slots hold no llama.cpp instance: enough for choosing and holding slots."""
    import threading

    from runners.llm.local.llama_server import LoglikModel, _Slot

    model = object.__new__(LoglikModel)
    model.slots, model._requests, model._picking = [_Slot(None) for _ in range(slots)], 0, threading.Lock()
    return model


def test_requests_served_at_once_each_hold_a_slot_of_their_own_and_free_it_after():
    model = _model_without_llama(2)
    model.slots[0].tokens = SYSTEM + [10, 11, 12, 13]
    with model._slot(SYSTEM + [10, 11, 12, 13, 14]) as first:
        with model._slot(SYSTEM + [10, 11, 12, 13, 14]) as second:
            assert first is model.slots[0] and second is model.slots[1]
            with pytest.raises(RuntimeError, match="more requests at once than slots"):
                with model._slot([]):
                    pass
    assert not any(slot.busy for slot in model.slots)


@pytest.mark.parametrize("parallel", [0, 3])
def test_a_server_serves_at_most_as_many_requests_at_once_as_it_has_slots(parallel):
    from runners.llm.local.llama_server import serve

    with pytest.raises(ValueError, match="parallel: must be between 1 and the slots"):
        serve(_model_without_llama(2), 0, parallel)


def test_a_parallel_server_evaluates_two_requests_at_once():
    """Each request waits inside the model until the other has arrived: one at a time never completes."""
    import json
    import threading
    import urllib.request

    from runners.llm.local.llama_server import serve

    model = _model_without_llama(2)
    both = threading.Barrier(2, timeout=10)
    model.alias = "m"
    model.complete = lambda body: {"index": both.wait()}
    server = serve(model, 0, parallel=2)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/v1/completions"

    def post(out: list) -> None:
        request = urllib.request.Request(url, data=json.dumps({"prompt": "x"}).encode(), method="POST")
        with urllib.request.urlopen(request, timeout=20) as response:
            out.append(json.loads(response.read())["index"])

    answers: list[int] = []
    clients = [threading.Thread(target=post, args=(answers,)) for _ in range(2)]
    try:
        for client in clients:
            client.start()
        for client in clients:
            client.join(timeout=30)
    finally:
        server.shutdown()
        server.server_close()
    assert sorted(answers) == [0, 1]
