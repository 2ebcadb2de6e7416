"""Bench: exact WD by assignment vs SciPy's LP, and GT-map cache hit vs rebuild.

Run: ``.venv/bin/python bench/bench_clickability_metrics.py``. Both figures and their ratios against the
baseline (SciPy ``wasserstein_distance_nd``; building the map) are measured in this run.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from scipy.stats import wasserstein_distance_nd

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmark.clickability.maps import ClickabilityMapCache, clickability_map  # noqa: E402
from benchmark.distribution_metrics import wasserstein_assignment  # noqa: E402


def _best_of(function, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return min(times)


def bench_wasserstein(n_clicks: int = 48, n_sets: int = 100) -> None:
    rng = np.random.default_rng(0)
    real = rng.normal(200, 30, size=(n_clicks, 2))
    sets = rng.normal(210, 35, size=(n_sets, n_clicks, 2)).round()
    lp = [wasserstein_distance_nd(s, real) for s in sets]
    assignment = [wasserstein_assignment(s, real) for s in sets]
    max_diff = float(np.max(np.abs(np.array(lp) - np.array(assignment))))
    t_lp = _best_of(lambda: [wasserstein_distance_nd(s, real) for s in sets], 3)
    t_as = _best_of(lambda: [wasserstein_assignment(s, real) for s in sets], 3)
    print(f"WD of one task (B={n_sets} sets of n={n_clicks}): scipy LP {t_lp * 1e3:.1f} ms, "
          f"assignment {t_as * 1e3:.1f} ms, speed-up x{t_lp / t_as:.1f} (max |diff| {max_diff:.2e} px)")  # fmt: skip


def bench_map_cache(height: int = 480, width: int = 640, n_clicks: int = 48) -> None:
    rng = np.random.default_rng(1)
    error = np.zeros((height, width), dtype=bool)
    error[100:380, 150:500] = True
    clicks = rng.normal((320, 240), 40, size=(n_clicks, 2))
    with tempfile.TemporaryDirectory() as tmp:
        cache = ClickabilityMapCache(Path(tmp), error_blur="paper")
        cache.get_or_build(dataset="B", full_stem="task", clicks_xy=clicks, error_mask=error)
        t_build = _best_of(lambda: clickability_map(clicks, error_mask=error, error_blur="paper"), 5)
        t_hit = _best_of(
            lambda: cache.get_or_build(dataset="B", full_stem="task", clicks_xy=clicks, error_mask=error), 5
        )
    print(f"GT map {width}x{height}, paper blur: build {t_build * 1e3:.1f} ms, cache hit {t_hit * 1e3:.1f} ms, "
          f"ratio x{t_build / t_hit:.1f}")  # fmt: skip


if __name__ == "__main__":
    bench_wasserstein()
    bench_map_cache()
