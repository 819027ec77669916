"""The two main jobs' figures (README, docs/lm.md), generated in one place: ``benchmarks/results/``.

Runs ``lightning-order fit`` on ``configs/demo.yaml`` and ``configs/lm-demo.yaml`` as a user
would, each in a fresh process with an empty cache, and writes what the docs quote about them:

- ``benchmarks/results/demo.json``: the classification demo's steps, validation accuracy and time;
- ``benchmarks/results/lm_demo.json``: the LM demo's CPU-seconds (user + system of the command),
  steps, validation perplexity and loss, and its corpus (documents loaded, kept by ``dedup``,
  train and validation documents and blocks), read from the prepared cache's manifest;
- ``benchmarks/results/lm_sharded.json``: the LM demo sharded over 2 CPU processes
  (``configs/lm-sharded.yaml``, FSDP2): its steps, validation perplexity, wall time, its train
  blocks and those each data-parallel rank reads an epoch (docs/validator.md, "Sharded models").

Then ``python benchmarks/figures.py --write`` rewrites every quote of them in the docs.

Usage::

    python benchmarks/demo_figures.py                  # every job as configured (about 6 min of CPU)
    python benchmarks/demo_figures.py --only demo      # one of them
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml
from figures import write_results

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
#: The job of each results file, and the command a user types for it.
JOBS = {
    "demo": "configs/demo.yaml",
    "lm_demo": "configs/lm-demo.yaml",
    "lm_sharded": "configs/lm-sharded.yaml",
}


def run_job(config: str, work: Path, extra: list[str]) -> dict[str, Any]:
    """Runs the job once; its metrics (the last logged value of each), steps, seconds and manifest."""
    cache, logs = work / "cache", work / "logs"
    command = [
        sys.executable, "-m", "lightning_order", "fit", "--config", config,
        "--data.cache_dir", str(cache),
        "--trainer.default_root_dir", str(logs),
        "--trainer.logger", "pytorch_lightning.loggers.CSVLogger",
        "--trainer.logger.save_dir", str(logs),
        *extra,
    ]  # fmt: skip
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, env={**os.environ, "CI": "true"})
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode:
        raise SystemExit(f"{' '.join(command)} failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    metrics: dict[str, float] = {}
    for path in sorted(logs.rglob("metrics.csv")):
        with path.open() as f:
            for row in csv.DictReader(f):
                metrics |= {k: float(v) for k, v in row.items() if v not in ("", None)}
    checkpoints = sorted(logs.rglob("*.ckpt"))
    steps = max(int(m[1]) for c in checkpoints if (m := re.search(r"step=(\d+)", c.name)))
    manifests = sorted(cache.rglob("manifest.json"))
    return {
        "metrics": metrics,
        "steps": steps,
        "wall_seconds": wall,
        "cpu_seconds": (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime),
        "manifest": json.loads(manifests[0].read_text()) if manifests else {},
    }


def demo_figures(run: dict[str, Any]) -> dict[str, Any]:
    return {
        "steps": run["steps"],
        "val_acc": round(run["metrics"]["val_acc"], 4),
        "wall_seconds": round(run["wall_seconds"], 1),
    }


def lm_demo_figures(run: dict[str, Any]) -> dict[str, Any]:
    stats = {r["step"]: r.get("stats") or {} for r in run["manifest"]["records"]}
    return {
        "cpu_seconds": round(run["cpu_seconds"], 1),
        "wall_seconds": round(run["wall_seconds"], 1),
        "steps": run["steps"],
        "val_ppl": round(run["metrics"]["val_ppl"], 2),
        "val_loss": round(run["metrics"]["val_loss"], 3),
        "documents": stats["load"]["rows"],
        "kept_by_dedup": stats["dedup"]["rows"],
        "train_documents": stats["split"]["train_rows"],
        "val_documents": stats["split"]["val_rows"],
        "train_blocks": stats["pack"]["train_blocks"],
        "val_blocks": stats["pack"]["val_blocks"],
        "vocab_size": run["manifest"]["info"]["dims"]["vocab_size"],
    }


def lm_sharded_figures(run: dict[str, Any]) -> dict[str, Any]:
    config = yaml.safe_load((ROOT / JOBS["lm_sharded"]).read_text())
    # The data is split over the data-parallel ranks only (tensor-parallel ranks read the same batches).
    ranks = config["trainer"]["strategy"]["init_args"]["data_parallel_size"]
    stats = {r["step"]: r.get("stats") or {} for r in run["manifest"]["records"]}
    # What a rank reads an epoch: its full batches (a rank's last, partial batch is dropped).
    steps_per_epoch = run["steps"] // config["trainer"]["max_epochs"]
    return {
        "wall_seconds": round(run["wall_seconds"], 1),
        "steps": run["steps"],
        "val_ppl": round(run["metrics"]["val_ppl"], 2),
        "data_parallel_ranks": ranks,
        "train_blocks": stats["pack"]["train_blocks"],
        "blocks_per_rank_epoch": steps_per_epoch * config["data"]["batch_size"],
    }


FIGURES = {"demo": demo_figures, "lm_demo": lm_demo_figures, "lm_sharded": lm_sharded_figures}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", choices=sorted(JOBS), action="append", help="run only these jobs")
    parser.add_argument("--out", type=Path, default=RESULTS, help="the results folder")
    parser.add_argument("extra", nargs="*", help="options passed to every job (quick runs in tests)")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    for name in args.only or sorted(JOBS):
        with tempfile.TemporaryDirectory(prefix=f"lightning-order-{name}-") as work:
            run = run_job(JOBS[name], Path(work), args.extra)
        command = f"python benchmarks/demo_figures.py --only {name}" + "".join(f" {e}" for e in args.extra)
        found = FIGURES[name](run)
        path = write_results(name, found, command, args.out, job=f"lightning-order fit --config {JOBS[name]}")
        print(f"{path}: {json.dumps(found)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
