"""A ``cuda`` device without running a kernel: its name, the check that refuses one that cannot work here in
one line, CUDA errors turned into device faults (a reply of their own from a prover process), and the
config's devices."""

from __future__ import annotations

import multiprocessing
import threading

import pytest

import prooflane.groth16.cuda as gpu_path
from prooflane.config import Config, visible_gpus
from prooflane.devices import DeviceFault, check_devices, frames, in_child
from prooflane.devices.cuda import device_index, device_problem, is_cuda_error, on_device
from prooflane.devices.in_child import ProverSide, serve
from prooflane.errors import ConfigError

pytest.importorskip("numba.cuda", reason="numba-cuda is not installed: pip install 'prooflane[cuda]'")


def test_a_device_name_gives_its_gpu_index() -> None:
    assert [device_index(n) for n in ("cuda:0", "cuda:3", "cuda", "cpu:1")] == [0, 3, 0, None]


def test_the_config_takes_cuda_devices_and_refuses_other_kinds() -> None:
    assert Config(devices=("cuda:0", "cuda:1")).resolved().devices == ("cuda:0", "cuda:1")
    assert Config(devices=("cuda", "cuda")).resolved().devices == ("cuda:0", "cuda:1")
    for wrong in ("gpu:0", "cuda:x", "cuda:"):
        with pytest.raises(ConfigError, match="expected 'cpu\\[:N\\]' or 'cuda\\[:N\\]'"):
            Config(devices=(wrong,))
    with pytest.raises(ConfigError, match="device_memory_bytes"):
        Config(device_memory_bytes=-1)


def test_devices_left_to_the_machine_never_pick_the_simulator() -> None:
    assert gpu_path.simulated() or gpu_path.gpu_available()
    if gpu_path.simulated():
        assert visible_gpus() == 1 and visible_gpus(simulator=False) == 0
        assert all(d.startswith("cpu:") for d in Config().resolved().devices)


def test_a_cuda_device_that_cannot_work_here_is_refused_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    check_devices(["cpu:0", "cuda:0"])  # the simulator (or a GPU) is here
    if gpu_path.simulated():
        assert device_problem("cuda:1") == "numba's CUDA simulator has 1 device (cuda:0 to cuda:0)"
    reason = "no NVIDIA GPU is visible (numba.cuda.is_available() is false)"
    monkeypatch.setattr(gpu_path, "unavailable_reason", lambda: reason)
    with pytest.raises(ConfigError) as refused:
        check_devices(["cpu:0", "cuda:0"])
    assert str(refused.value) == f"device 'cuda:0' cannot work on this machine: {reason}"
    assert "\n" not in str(refused.value)
    check_devices(["cpu:0"])  # cpu devices never ask


def test_a_cuda_error_becomes_a_device_fault_and_others_stay_themselves() -> None:
    from numba.cuda.cudadrv.driver import CudaAPIError

    lost = CudaAPIError(700, "an illegal memory access was encountered")  # type: ignore[no-untyped-call]
    assert is_cuda_error(lost) and not is_cuda_error(ValueError("no"))

    def fails(exc: Exception) -> None:
        raise exc

    with pytest.raises(DeviceFault, match=r"CUDA error: CudaAPIError: .*illegal memory access"):
        on_device(lambda: fails(lost))
    with pytest.raises(ValueError, match="no"):
        on_device(lambda: fails(ValueError("no")))


class _Faulty(ProverSide):
    def start(self) -> tuple[dict[str, object], float]:
        raise DeviceFault("CUDA error: the context is lost")


def test_a_prover_answers_a_device_fault_with_a_reply_of_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(in_child, "ignore_interrupts", lambda: None)  # signals: main thread only
    here, there = multiprocessing.Pipe()
    server = threading.Thread(target=serve, args=(there, _Faulty()))
    server.start()
    frames.send(here, ("start",))
    assert frames.receive(here) == ("fault", "CUDA error: the context is lost")
    frames.send(here, ("device", "cpu", 0))
    assert frames.receive(here) == ("ok", None)
    here.close()  # serve returns at end of file
    server.join(10)
    assert not server.is_alive()
