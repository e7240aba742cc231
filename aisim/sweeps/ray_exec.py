"""`--executor ray`: the same point function on a Ray cluster (optional extra `aisim-serving[ray]`).

Each Ray worker process keeps its own pass-time memos between the points it runs (module state
of aisim.sweeps.point), exactly like a local worker process; the driver writes every file, so
workers need no shared disk. Rows are byte-identical to the local executor's: same function,
same inputs, deterministic simulation.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from aisim.errors import AisimError

_ENV = ("AISIM_CACHE_DIR",)


def ray_available() -> bool:
    try:
        import ray  # noqa: F401
    except ImportError:
        return False
    return True


def run_on_ray(tasks: list[dict], address: str | None, collect: Callable) -> None:
    try:
        import ray
    except ImportError:
        raise AisimError(
            "--executor ray needs Ray: pip install 'aisim-serving[ray]' (in a "
            "checkout: pip install -e '.[ray]')"
        ) from None
    started_here = not ray.is_initialized()
    if started_here:
        env = {k: os.environ[k] for k in _ENV if k in os.environ}
        kwargs = {"address": address} if address else {"include_dashboard": False}
        try:
            ray.init(
                runtime_env={"env_vars": env} if env else None,
                log_to_driver=False,
                configure_logging=False,
                **kwargs,
            )
        except (ConnectionError, RuntimeError, ValueError) as exc:
            raise AisimError(
                f"--ray-address {address}: cannot connect to Ray: {' '.join(str(exc).split())}"
            ) from None
    try:
        from aisim.sweeps.point import run_point

        remote = ray.remote(num_cpus=1)(run_point)
        pending = [remote.remote(t) for t in tasks]
        try:
            while pending:
                done, pending = ray.wait(pending, num_returns=1)
                for ref in done:
                    collect(*ray.get(ref))
        except KeyboardInterrupt:
            for ref in pending:  # an interrupted sweep leaves no task running on the cluster
                ray.cancel(ref, force=True)
            raise
    finally:
        if started_here:
            ray.shutdown()
