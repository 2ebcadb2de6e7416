"""Bench: one training iteration (forward + KLD + backward + Adam) of the small CM vs SegNeXt-B on CPU.

Run: ``.venv/bin/python bench/bench_clickability_train.py [--size 416] [--batch 4] [--tasks 200] [--threads 1]``.
Prints seconds per iteration for both configurations (SegNeXt-B is the baseline measured in the same run)
and the implied minutes per epoch and per 20 epochs for ``--tasks`` training tasks.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmark.clickability.model import ClickabilityNet, count_parameters, get_config  # noqa: E402
from benchmark.clickability.train import kld_loss  # noqa: E402


def seconds_per_iteration(config: str, *, size: int, batch: int, repeats: int) -> float:
    torch.manual_seed(0)
    net = ClickabilityNet(get_config(config)).train()
    optimizer = torch.optim.Adam(net.parameters(), lr=1e-3)
    image = torch.randn(batch, 3, size, size)
    masks = torch.zeros(batch, 2, size, size)
    masks[:, :, size // 4 : 3 * size // 4, size // 4 : 3 * size // 4] = 1.0
    target = torch.rand(batch, 1, size, size)
    times = []
    for _ in range(repeats + 1):  # the first iteration warms up allocators
        start = time.perf_counter()
        loss = kld_loss(net(image, masks), target)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        times.append(time.perf_counter() - start)
    return min(times[1:])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--size", type=int, default=416)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--tasks", type=int, default=200, help="training tasks per epoch for the estimate")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"torch threads: {torch.get_num_threads()}, input {args.size}px, batch {args.batch}")
    results = {}
    for config in ("segnext-b", "small"):
        params = count_parameters(ClickabilityNet(get_config(config)))
        results[config] = seconds_per_iteration(
            config, size=args.size, batch=args.batch, repeats=args.repeats
        )
        epoch_min = results[config] * args.tasks / args.batch / 60
        print(f"{config:>10}: {params / 1e6:6.2f} M params, {results[config]:.2f} s/iteration, "
              f"~{epoch_min:.1f} min/epoch, ~{20 * epoch_min:.0f} min for 20 epochs of {args.tasks} tasks")  # fmt: skip
    print(f"small vs segnext-b: x{results['segnext-b'] / results['small']:.1f} faster per iteration")


if __name__ == "__main__":
    main()
