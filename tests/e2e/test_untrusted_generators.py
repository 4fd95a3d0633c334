"""A legitimate circom circuit whose loop is bound by an input, given a huge bound, on a real daemon: its
generator never returns, yet its job fails naming the limit within ``synthesis_timeout_secs``, other jobs
(circom and built-in) submitted meanwhile finish, and a cancel ends the process that spins at once."""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from prooflane.cli.daemon_process import DaemonProcess
from prooflane.client import Client
from prooflane.devices.roles import Role
from prooflane.groth16 import read_r1cs, setup, write_zkey
from prooflane.models import InlineSector
from prooflane.states import JobState
from tests.support.daemons import running, start_daemon, wait_done, wait_until
from tests.support.paths import NODE_BIN

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

LOOP = """pragma circom 2.0.0;
template Loop() {
  signal input n; signal input x; signal output y;
  var acc = 0; var i = 0;
  while (i < n) { acc = acc + x; i = i + 1; }
  y <-- acc; y === x * n;
}
component main = Loop();
"""
HUGE = str(10**40)  # the loop's bound: far beyond any limit


@pytest.fixture(scope="module")
def loop_circuit(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("loop")
    (folder / "loop.circom").write_text(LOOP)
    argv = [str(NODE_BIN / "circom2"), "loop.circom", "--r1cs", "--wasm", "-o", "."]
    subprocess.run(argv, check=True, capture_output=True, cwd=folder, timeout=300)
    write_zkey(folder / "loop.zkey", setup(read_r1cs(folder / "loop.r1cs"), seed=b"loop"))
    return {"zkey": folder / "loop.zkey", "wasm": folder / "loop_js" / "loop.wasm"}


@contextlib.contextmanager
def daemon_with(factory: pytest.TempPathFactory, name: str, timeout_secs: float) -> Iterator[DaemonProcess]:
    extra = f"synthesis_timeout_secs = {timeout_secs}\nsynthesis_workers_max = 2\n"
    yield from running(start_daemon(factory, name, extra_config=extra))


def spinning_synthesis(daemon: DaemonProcess) -> psutil.Process | None:
    """The daemon's synthesis process that is computing (the generator in its loop), if one is."""
    for child in psutil.Process(daemon.pid).children(recursive=True):
        try:
            if child.name() == Role.SYNTHESIS.value and child.cpu_times().user > 1.0:
                return child
        except psutil.NoSuchProcess:
            continue
    return None


def test_a_generator_that_never_returns_fails_its_job_naming_the_limit_while_others_finish(
    tmp_path_factory: pytest.TempPathFactory, loop_circuit: dict[str, Path]
) -> None:
    with daemon_with(tmp_path_factory, "loop-limit", 8) as daemon, Client(daemon.url) as client:
        client.upload_circuit("loop", loop_circuit["zkey"], wasm=loop_circuit["wasm"])
        stuck = client.submit("circom", circuit="loop", witnesses=[{"n": HUGE, "x": 3}])
        others = [
            client.submit("circom", circuit="loop", witnesses=[{"n": 4, "x": 3}]),
            client.submit("winning-post", sector=InlineSector(size=256, seed="07")),
        ]
        ended = wait_done(client, [*others, stuck])
        assert [view.state for view in ended] == [JobState.DONE, JobState.DONE, JobState.FAILED]
        assert ended[-1].error == (
            "partition 0 failed: synthesis failed: it ran past its time limit of 8 s, and its process "
            "was ended (synthesis_timeout_secs = 8)"
        )
        assert client.health_reason() is None


def test_a_cancel_ends_the_process_that_spins_and_the_next_job_is_proved(
    tmp_path_factory: pytest.TempPathFactory, loop_circuit: dict[str, Path]
) -> None:
    with daemon_with(tmp_path_factory, "loop-cancel", 3600) as daemon, Client(daemon.url) as client:
        client.upload_circuit("loop", loop_circuit["zkey"], wasm=loop_circuit["wasm"])
        stuck = client.submit("circom", circuit="loop", witnesses=[{"n": HUGE, "x": 3}])
        wait_until("the generator to spin", lambda: spinning_synthesis(daemon) is not None)
        spinning = spinning_synthesis(daemon)
        assert spinning is not None
        assert client.cancel(stuck).state is JobState.CANCELLED
        spinning.wait(timeout=60)  # ended, not left to spin: raises TimeoutExpired otherwise
        good = client.submit("circom", circuit="loop", witnesses=[{"n": 5, "x": 2}])
        (view,) = wait_done(client, [good])
        assert view.state is JobState.DONE
        assert client.health_reason() is None
