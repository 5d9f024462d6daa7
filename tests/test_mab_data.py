"""Loading FactConsolidation and the MQuAKE templates: local folders, the online path, the error."""

import io
import urllib.error

import pytest

from envs.memoryagentbench import data as mab_data
from envs.memoryagentbench.data import (
    DATA_DIR_ENV,
    DataNotFoundError,
    load_conflict_resolution,
    load_mquake_templates,
)
from tests.helpers.shared_data import require_data

LOCAL_SOURCES = [f"factconsolidation_{h}_{n}" for h in ("sh", "mh") for n in ("6k", "32k", "262k")]


@pytest.fixture(autouse=True)
def fresh_downloads():
    """The online loaders cache per process; each test starts and ends without that cache."""
    mab_data._download_rows.cache_clear()
    mab_data._download_templates.cache_clear()
    yield
    mab_data._download_rows.cache_clear()
    mab_data._download_templates.cache_clear()


@pytest.fixture
def offline(monkeypatch, tmp_path):
    """No configured data, no network, an empty user cache."""
    monkeypatch.delenv(DATA_DIR_ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))

    def no_network(*args, **kwargs):
        raise urllib.error.URLError("offline")

    monkeypatch.setattr(mab_data.urllib.request, "urlopen", no_network)


@pytest.mark.parametrize("source", LOCAL_SOURCES)
def test_every_local_source_loads_from_the_env_var(monkeypatch, source):
    monkeypatch.setenv(DATA_DIR_ENV, str(require_data()))
    record = load_conflict_resolution(source)
    assert record.source == source
    assert record.context.startswith("Here is a list of facts:\n0. ")
    assert len(record.questions) == len(record.answers) == len(record.qa_pair_ids) == 100
    assert all(golds and all(isinstance(g, str) for g in golds) for golds in record.answers)


def test_explicit_data_dir_wins_and_reads_are_cached(monkeypatch, tmp_path):
    monkeypatch.setenv(DATA_DIR_ENV, str(tmp_path))  # empty: would fail if consulted
    first = load_conflict_resolution("factconsolidation_sh_6k", require_data())
    assert load_conflict_resolution("factconsolidation_sh_6k", str(require_data())) is first
    templates = load_mquake_templates(require_data())
    assert templates.cloze["P26"] == "[X] is married to __"
    assert templates.question["P26"] == "Who is [X] married to?"


def test_bad_source_names_the_parameter():
    with pytest.raises(ValueError, match="source"):
        load_conflict_resolution("factconsolidation_sh_7k", require_data())
    with pytest.raises(ValueError, match="source: 'factconsolidation_sh_64k' is not in"):
        load_conflict_resolution(
            "factconsolidation_sh_64k", require_data()
        )  # upstream has it, the local copy not


def _assert_names_both_ways(message: str) -> None:
    assert DATA_DIR_ENV in message and "env.data_dir" in message
    assert "online" in message and "ai-hyz/MemoryAgentBench" in message and "HF_ENDPOINT" in message


def test_missing_data_names_both_ways(offline, monkeypatch, tmp_path):
    monkeypatch.setenv(DATA_DIR_ENV, str(tmp_path))
    with pytest.raises(DataNotFoundError) as configured_but_empty:
        load_conflict_resolution("factconsolidation_sh_6k")
    _assert_names_both_ways(str(configured_but_empty.value))
    assert isinstance(configured_but_empty.value, FileNotFoundError)

    monkeypatch.delenv(DATA_DIR_ENV)
    with pytest.raises(DataNotFoundError) as nothing_configured:
        load_conflict_resolution("factconsolidation_sh_6k")
    _assert_names_both_ways(str(nothing_configured.value))
    with pytest.raises(DataNotFoundError) as no_templates:
        load_mquake_templates()
    _assert_names_both_ways(str(no_templates.value))


def test_online_templates_are_pinned_verified_and_cached(offline, monkeypatch, tmp_path):
    urls = []

    def github(url, timeout):
        urls.append(url)
        return io.BytesIO((require_data() / "mquake" / url.rsplit("/", 1)[1]).read_bytes())

    monkeypatch.setattr(mab_data.urllib.request, "urlopen", github)
    templates = load_mquake_templates()
    assert templates == load_mquake_templates(require_data())
    assert len(urls) == 2 and all(mab_data.MQUAKE_COMMIT in u and "princeton-nlp/MQuAKE" in u for u in urls)

    # A new process reads the verified copies from the user cache, without the network.
    mab_data._download_templates.cache_clear()
    monkeypatch.setattr(mab_data.urllib.request, "urlopen", lambda url, timeout: pytest.fail("went online"))
    assert load_mquake_templates() == templates


def test_online_templates_with_a_wrong_checksum_are_refused(offline, monkeypatch):
    monkeypatch.setattr(mab_data.urllib.request, "urlopen", lambda url, timeout: io.BytesIO(b"{}"))
    with pytest.raises(DataNotFoundError, match="sha256"):
        load_mquake_templates()
