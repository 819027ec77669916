"""The local engine under failure: its workers die with their parent, a dead worker is one line (issue #32).

A preparation killed by SIGKILL used to leave its pool's workers alive, reparented, for good; a
worker killed mid-step (the out-of-memory killer) surfaced as a raw ``BrokenProcessPool``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from lightning_order import DataError
from lightning_order.data.engine.engines import LocalEngine
from lightning_order.data.engine.runner import DataState, StepContext, StepRegistry, run_steps
from lightning_order.ledger import StepLedger

REPO = Path(__file__).resolve().parents[4]

# A real LM preparation (num_proc=2) whose pool's workers write their pids and then hold their work
# item (the partition pass of `clean`), as a long step does.
_HOLDING_SCRIPT = textwrap.dedent(
    """
    import os, sys, time
    from pathlib import Path
    from lightning_order.data.engine import engines
    from lightning_order.data.lm import prepare, tasks
    from lightning_order.data.lm.config import LMConfig

    def hold(item):
        with open(os.path.join(sys.argv[1], str(os.getpid())), "w"):
            pass
        time.sleep(120)

    if __name__ == "__main__":
        engines.MIN_PARALLEL_BYTES = 0  # real worker processes, even for a small corpus
        tasks.merge_partition = hold
        config = LMConfig(num_proc=2, num_partitions=4, max_documents=100, cache_dir=sys.argv[2])
        prepare.prepare_cache(Path(sys.argv[2]), config, prepare.order_of(config, None))
    """
)


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, dead but not yet reaped by its new parent, does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _wait_for(condition, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.1)
    return condition()


def _kill_myself(item: int) -> int:
    os.kill(os.getpid(), signal.SIGKILL)
    return item


def _square(item: int) -> int:
    return item * item


def _own_pid(item: int) -> int:
    time.sleep(0.05)  # each worker takes some of the items
    return os.getpid()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads worker states from /proc")
def test_workers_die_when_the_preparing_process_is_killed(tmp_path):
    script = tmp_path / "prepare.py"
    script.write_text(_HOLDING_SCRIPT)
    pids = tmp_path / "pids"
    pids.mkdir()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    parent = subprocess.Popen([sys.executable, str(script), str(pids), str(tmp_path / "cache")], env=env)
    try:
        assert _wait_for(lambda: len(list(pids.iterdir())) == 2, 60), "the two workers never started"
        workers = [int(p.name) for p in pids.iterdir()]
        assert all(_alive(pid) for pid in workers)
        parent.send_signal(signal.SIGKILL)  # mid-step, as the out-of-memory killer or a scheduler does
        parent.wait(10)
        assert _wait_for(lambda: not any(_alive(pid) for pid in workers), 10), "workers outlived their parent"
    finally:
        parent.kill()
        for pid in [int(p.name) for p in pids.iterdir()]:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)


def test_a_worker_killed_mid_map_is_one_data_error_naming_the_cause():
    engine = LocalEngine(2, min_parallel_bytes=0)
    try:
        with pytest.raises(DataError) as caught:
            engine.map(_kill_myself, [1, 2, 3], desc="clean train")
        message = str(caught.value)
        assert "a worker process died while running _kill_myself (clean train)" in message
        assert "killed by signal 9, SIGKILL" in message
        assert "memory" in message and "lower num_proc (now 2" in message and "num_partitions" in message
        assert "BrokenProcessPool" not in message and "\n" not in message
        assert engine.map(_square, [1, 2, 3]) == [1, 4, 9]  # the next map starts new workers
    finally:
        engine.close()


def test_a_worker_killed_in_a_step_names_the_step():
    registry = StepRegistry()

    @registry.register("clean")
    def clean(ctx, state):
        ctx.engine.map(_kill_myself, [1, 2], desc="clean train")

    engine = LocalEngine(2, min_parallel_bytes=0)
    try:
        with pytest.raises(DataError) as caught:
            run_steps(["clean"], registry, StepContext(None, engine=engine), DataState(), StepLedger())
    finally:
        engine.close()
    assert caught.value.step == "clean"
    assert str(caught.value).startswith("[step 'clean'] a worker process died")


def test_a_worker_killed_while_the_pool_idles_is_the_same_line():
    engine = LocalEngine(2, min_parallel_bytes=0)
    try:
        pids = set(engine.map(_own_pid, [1, 2, 3, 4]))
        os.kill(pids.pop(), signal.SIGKILL)  # between two maps, as the out-of-memory killer may
        time.sleep(0.5)  # lets the pool notice the death
        with pytest.raises(DataError, match=r"a worker process died while running _square .*SIGKILL.*memory"):
            engine.map(_square, [1, 2, 3], desc="pack train")
    finally:
        engine.close()


def test_a_single_item_runs_in_a_worker_once_the_workers_are_up():
    """Issue #35: the driver does no worker's share, also of a one-item map (dedup's last cluster merge)."""
    import os

    from lightning_order.data.engine.engines import LocalEngine

    with LocalEngine(2, min_parallel_bytes=0) as engine:
        assert engine.map(_pid, [None]) == [os.getpid()]  # no worker yet: one item is not worth a pool
        engine.start()
        assert engine.map(_pid, [None]) != [os.getpid()]


def _pid(_: object) -> int:
    import os

    return os.getpid()
