"""The one place that picks a backend from the config."""

from __future__ import annotations

from ..config import Config
from ..errors import ConfigError
from .backend import DeviceBackend

__all__ = ["backend_for"]


def backend_for(config: Config) -> DeviceBackend:
    """The backend ``config`` asks for: Ray actors when ``[ray] address`` is set, else local processes
    sized by the (resolved) config's devices (``cpu`` or ``cuda``), workers and synthesis processes."""
    if config.ray.address:
        from .ray import RayBackend

        if any(d.startswith("cuda") for d in config.devices):
            raise ConfigError("key 'devices': cuda devices run on local processes only, not on a Ray cluster")

        return RayBackend.from_config(config)
    from .process import ProcessBackend

    resolved = config.resolved()
    return ProcessBackend(
        pool_size=resolved.synthesis_workers,
        workers=len(resolved.devices) * resolved.workers_per_device,
        niceness=resolved.worker_niceness,
        cores=resolved.core_budget,
        threads=resolved.threads_per_call,
        tables=resolved.msm_tables is True,  # "auto": each key's stored tables, when the daemon says
        split_prove=resolved.split_prove,
    )
