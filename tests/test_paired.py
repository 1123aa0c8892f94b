"""Paired statistics of ``mfm results`` (issue 44), against values computed independently: the
exact McNemar test against scipy's binomial test and against a brute-force enumeration of
sign flips; the paired bootstrap against the exact bootstrap distribution, every resample
enumerated."""
from __future__ import annotations

import itertools
import math
import statistics

import numpy as np
import pytest

from loaders.paired import _ranges, mcnemar_exact, paired_bootstrap, paired_table, seed_class
from loaders.paper_measures import RunMeasures, Retargeting


def brute_mcnemar(only_a: int, only_b: int) -> float:
    """The two-sided p of the discordant split by enumerating every assignment of the
    discordant pairs to a or b under the null (each equally likely): the share as extreme."""
    n = only_a + only_b
    if n == 0:
        return 1.0
    observed = abs(only_a - only_b)
    splits = [sum(bits) for bits in itertools.product((0, 1), repeat=n)]
    return sum(1 for k in splits if abs(2 * k - n) >= observed) / len(splits)


@pytest.mark.parametrize("pairs", [
    [(True, False)] * 5 + [(True, True)] * 3,
    [(True, False)] * 9 + [(False, True)] * 5 + [(False, False)] * 2,
    [(True, False)] * 4 + [(False, True)] * 4,
    [(True, True)] * 6,
    [(False, True)] * 1 + [(True, False)] * 7 + [(True, True)] * 13,
])
def test_mcnemar_matches_scipy_and_enumeration(pairs: list[tuple[bool, bool]]) -> None:
    a, b = [x for x, _ in pairs], [y for _, y in pairs]
    only_a, only_b, p = mcnemar_exact(a, b)
    assert (only_a, only_b) == (sum(x and not y for x, y in pairs), sum(y and not x for x, y in pairs))
    assert math.isclose(p, brute_mcnemar(only_a, only_b), rel_tol=1e-12)
    scipy_stats = pytest.importorskip("scipy.stats")
    if only_a + only_b:
        expected = scipy_stats.binomtest(only_a, only_a + only_b, 0.5).pvalue
        assert math.isclose(p, expected, rel_tol=1e-9)


def test_mcnemar_of_the_docs_example() -> None:
    """9 of 13 against 5 of 13 with every success of the second also one of the first: 4
    discordant pairs, all one way, p = 2 / 2**4."""
    a = [True] * 9 + [False] * 4
    b = [True] * 5 + [False] * 8
    assert mcnemar_exact(a, b) == (4, 0, 0.125)


def exact_bootstrap(d: list[float], level: float = 0.95) -> tuple[float, float]:
    """Quantiles of the mean over all n**n equally likely resamples of ``d``."""
    means = np.array([statistics.fmean(c) for c in itertools.product(d, repeat=len(d))])
    tail = (1 - level) / 2
    lo, hi = np.quantile(means, [tail, 1 - tail])
    return float(lo), float(hi)


def test_paired_bootstrap_matches_the_exact_distribution() -> None:
    a = [1200.0, 3400.0, 15000.0, 2100.0, 800.0, 15000.0]
    b = [1500.0, 15000.0, 15000.0, 2600.0, 700.0, 9000.0]
    mean, lo, hi = paired_bootstrap(a, b, resamples=200_000, seed=1)
    d = [x - y for x, y in zip(a, b)]
    assert math.isclose(mean, statistics.fmean(d))
    elo, ehi = exact_bootstrap(d)
    spread = max(d) - min(d)
    assert abs(lo - elo) < 0.02 * spread and abs(hi - ehi) < 0.02 * spread
    assert paired_bootstrap(a, b, seed=7) == paired_bootstrap(a, b, seed=7)
    one = paired_bootstrap([3.0], [1.0])
    assert one[0] == 2.0 and math.isnan(one[1]) and math.isnan(one[2])
    with pytest.raises(ValueError):
        paired_bootstrap([1.0], [1.0, 2.0])


def run(method: str, seed: int, done: int | None, task: str = "reach-3000", budget: int = 15000) -> RunMeasures:
    return RunMeasures(name=f"{task}_{method}_s{seed}", task=task, method=method, seed=seed, milestones=10, of=10,
                       steps=done or budget, budget=budget, status="finished", turns=1, tool_calls=0,
                       calls_by_tool={}, deaths=0, diamond_step=done, retarget=Retargeting(), done_step=done)


def test_paired_table_pairs_runs_by_seed() -> None:
    ms = [run("mfm", 1, 4000), run("mfm", 2, None), run("mfm", 3, 5000), run("mfm", 4, 3100),
          run("vista", 1, None), run("vista", 2, None), run("vista", 3, 7000), run("vista", 5, 3000),
          run("vista no-budget", 1, 6000), run("vista no-budget", 3, None), run("mfm no-budget", 3, 2000)]
    t = paired_table(ms)
    rows = {(r["a"], r["b"]): r for r in t.to_dict("records")}
    assert list(rows) == [("mfm", "vista"), ("mfm no-budget", "vista no-budget"), ("mfm no-budget", "mfm"),
                          ("vista no-budget", "vista")]
    across = rows[("mfm no-budget", "vista no-budget")]
    assert across["seeds"] == [3] and (across["only_a"], across["only_b"]) == (1, 0)
    mv = rows[("mfm", "vista")]
    assert mv["seeds"] == [1, 2, 3] and (mv["successes_a"], mv["successes_b"]) == (2, 1)
    assert (mv["only_a"], mv["only_b"], mv["p_mcnemar"]) == (1, 0, 1.0)
    assert math.isclose(mv["steps_diff"], ((4000 - 15000) + 0 + (5000 - 7000)) / 3)
    arm = rows[("vista no-budget", "vista")]
    assert arm["pairs"] == 2 and (arm["only_a"], arm["only_b"], arm["p_mcnemar"]) == (1, 1, 1.0)


def test_seed_block_names_ranges_and_classes() -> None:
    assert _ranges([3, 0, 1, 2, 7, 100, 101, 139]) == "0-3, 7, 100-101, 139"
    assert seed_class(list(range(100, 140))) == "held-out"
    assert seed_class([s for s in range(100, 143) if s not in (109, 120, 127)]) == "held-out"
    assert seed_class([29, 100]) == "mixed" and seed_class([50]) == "mixed"
    assert seed_class(list(range(0, 30))) == "development"
    assert seed_class([5, 120]) == "mixed"


def test_between_table_pairs_each_method_with_itself_in_another_folder() -> None:
    from loaders.paired import between_markdown, between_table

    here = [run("mfm", 1, 4000), run("mfm", 2, None), run("mfm", 3, 5000), run("vista", 1, 3000),
            run("direct", 1, None), run("mfm", 1, 900, task="reach-1000")]
    there = [run("mfm", 1, None), run("mfm", 2, 6000), run("mfm", 3, 4000), run("mfm", 4, 2000),
             run("vista", 2, 3000), run("direct", 1, None)]
    t = between_table(here, there)
    assert [(r["task"], r["method"]) for r in t.to_dict("records")] == [("reach-3000", "direct"),
                                                                      ("reach-3000", "mfm")]
    mfm = t.to_dict("records")[1]
    assert mfm["seeds"] == [1, 2, 3] and (mfm["successes_a"], mfm["successes_b"]) == (2, 2)
    assert (mfm["only_a"], mfm["only_b"], mfm["p_mcnemar"]) == (1, 1, 1.0)
    assert math.isclose(mfm["steps_diff"], ((4000 - 15000) + (15000 - 6000) + (5000 - 4000)) / 3)
    cells = between_markdown(here, there)
    assert list(cells["successes here / there"]) == ["0 / 0", "2 / 2"]
    assert between_table(here, []).empty


def test_results_against_the_same_folder_finds_no_difference() -> None:
    """``mfm results ROOT --against ROOT``: every method paired with itself, so no seed differs."""
    import subprocess
    import sys

    from conftest import REPO

    out = subprocess.run([sys.executable, "-m", "mfm.cli", "results", "sample_runs", "--against", "sample_runs"],
                         capture_output=True, text=True, cwd=REPO, check=True).stdout
    block = out.split("### Each method here against itself under `sample_runs`", 1)[1].split("###", 1)[0]
    rows = [line.split("|")[1:-1] for line in block.splitlines() if line.startswith("| ") and "---" not in line][1:]
    assert rows
    for row in rows:
        cells = [c.strip() for c in row]
        assert cells[4].split(" / ") == ["0", "0"] and cells[5] == "1" and cells[6].startswith("+0"), cells
    bad = subprocess.run([sys.executable, "-m", "mfm.cli", "results", "sample_runs", "--against", "no/such"],
                         capture_output=True, text=True, cwd=REPO)
    assert bad.returncode == 2 and "no/such: no such folder" in bad.stderr
    empty = subprocess.run([sys.executable, "-m", "mfm.cli", "results", "sample_runs", "--against", "docs"],
                           capture_output=True, text=True, cwd=REPO)
    assert empty.returncode == 1 and empty.stderr.strip() == "mfm results: no runs under docs", empty.stderr
