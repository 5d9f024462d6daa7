"""Log-likelihood scoring against the REAL local models (make test-llm): SmolLM2-135M-Instruct behind
llama-cpp-python's server and Gemma 3 270M behind runners.llm.local.llama_server. Memory that names an option
raises that option's score; the preset action names are one token each; the plan's token estimate is
within 10% of what a real run reports. Nothing is asserted on exact numbers. Skipped, with the reason,
when the local-llm extra is not installed."""

from __future__ import annotations

import asyncio
import math
import os
import re
import subprocess
import sys

import pyarrow.parquet as pq
import pytest
from omegaconf import OmegaConf

from analysis.streamlog.stream import EPISODES
from envs.base import Task
from runners.agent.prompt import labels_for, render
from runners.llm.backend import Request
from runners.llm.local.serve import GEMMA_ALIAS, MODEL_ALIAS
from runners.llm.openai_backend import OpenAIBackend
from runners.run import CONF_DIR, PROJECT_ROOT
from tepa.evidence import Evidence

pytestmark = pytest.mark.llm

WORDS = tuple(OmegaConf.load(CONF_DIR / "env" / "controlled_drift_words.yaml").actions)
SERVERS = {"llm_server": MODEL_ALIAS, "gemma_server": GEMMA_ALIAS}
JOBS = range(3)


def decision(job: int, remembered: str | None = None) -> Request:
    """Job `job`'s decision between three of the preset names (in an order that varies with the job),
    with an empty memory or three VALID lines for `remembered`."""
    options = tuple(WORDS[(job + i) % 3] for i in range(3))
    task = Task(
        key=job, text=f"Job {job}: pick the action that completes it.", phase="stable", t=9, options=options
    )
    text = f'action "{remembered}" worked for job {job}'
    lines = (
        [] if remembered is None else [Evidence(job, remembered, True, t, text, "outcome") for t in (2, 5, 8)]
    )
    return Request(render(task, lines), seed=0, labels=labels_for(task), options=options)


def scores(reply: str) -> dict[str, tuple[float, float]]:
    """label -> (summed, per-token) log-likelihood, from a loglik reply."""
    sums = dict(re.findall(r"([A-Z])=(-?[\d.]+)", reply.split("| per-token")[0]))
    means = dict(re.findall(r"([A-Z])=(-?[\d.]+)", reply.split("| per-token")[1]))
    return {k: (float(sums[k]), float(means[k])) for k in sums}


def share(scored: dict[str, tuple[float, float]], label: str) -> float:
    """The option's probability among the options (its log-likelihood normalised over them): a longer
    prompt moves every option's log-likelihood, what memory should move is the choice between them."""
    return math.exp(scored[label][0]) / sum(math.exp(total) for total, _ in scored.values())


def ask(base_url: str, model: str, requests: list[Request]) -> list[str]:
    backend = OpenAIBackend(base_url, model, scoring="loglik", max_concurrency=1, timeout=600.0)

    async def go():
        try:
            return [await backend.complete(r) for r in requests]
        finally:
            await backend.aclose()

    replies = asyncio.run(go())
    assert all(r.error is None for r in replies), [r.error for r in replies]
    return [r.text for r in replies]


@pytest.mark.parametrize("server", list(SERVERS))
def test_memory_that_names_an_option_raises_its_share_and_the_names_are_one_token(server, request):
    """Over a handful of prompts (3 jobs, each option named in turn), the named option's share of the
    options' probability is higher on average with memory than without; single prompts may not move
    (a tiny model's prior for an option or for the first one shown can outweigh three memory lines)."""
    base_url, model = request.getfixturevalue(server), SERVERS[server]
    cases = [(job, named) for job in JOBS for named in WORDS[:3]]
    replies = ask(base_url, model, [decision(job) for job in JOBS] + [decision(j, n) for j, n in cases])
    without = {job: scores(reply) for job, reply in zip(JOBS, replies, strict=False)}
    shares = []
    for (job, named), reply in zip(cases, replies[len(JOBS) :], strict=True):
        label = "ABC"[decision(job).options.index(named)]
        shares.append((share(without[job], label), share(scores(reply), label)))
    before, after = (sum(s) / len(s) for s in zip(*shares, strict=True))
    print(f"\n{model}: the named option's mean share {before:.3f} without memory, {after:.3f} with it")
    assert after > before, shares
    assert all(total == mean for scored in without.values() for total, mean in scored.values())  # one token


def test_the_plan_is_within_ten_percent_of_the_tokens_a_real_gemma_run_reports(gemma_server, tmp_path):
    command = [
        sys.executable, "-m", "runners.run", "env=controlled_drift_words", "env.phase_length=3", "seeds=[0]",
        "memory=append_only", "llm=local_gemma", f"llm.base_url={gemma_server}", f"results_dir={tmp_path}",
        "progress=false",
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(PROJECT_ROOT)}
    plan = subprocess.run([*command, "plan=true"], capture_output=True, text=True, env=env, timeout=300)
    assert plan.returncode == 0, plan.stderr
    estimate = int(re.search(r"about ([\d,]+) prompt tokens", plan.stdout).group(1).replace(",", ""))
    real = subprocess.run(command, capture_output=True, text=True, env=env, timeout=900)
    assert real.returncode == 0, real.stderr
    (path,) = tmp_path.glob(f"runs/adhoc/**/append_only/**/seed=0/{EPISODES}")
    spent = sum(pq.read_table(path).column("prompt_tokens").to_pylist())
    print(f"\nplan: {estimate} prompt tokens; the real Gemma run: {spent}")
    assert abs(estimate - spent) <= 0.1 * spent
