"""The collector's devices: parse, check that the machine has them, resolve the defaults.

Rules (``collector.*`` config keys):
- nothing given: env and policy stay where they are, rollouts are stored on the env's device;
- ``env_device`` / ``policy_device``: the collector moves env and policy there;
- ``device``: env and policy together; with ``env_device`` or ``policy_device`` it is an error;
- ``storing_device``: where rollouts are written (default: the env's device).
A device this machine lacks is a one-line ConfigError, raised before anything is built.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from rltool.errors import ConfigError

_KINDS = "use cpu, cuda, cuda:N or mps"
DEVICE_KEYS = ("device", "env_device", "policy_device", "storing_device")  # collector.* keys


def check_device(name: str, key: str) -> torch.device:
    """``name`` as a torch.device this machine has (``cuda`` -> ``cuda:<current>``), else
    ConfigError naming ``key``."""
    try:
        dev = torch.device(name)
    except (RuntimeError, ValueError, TypeError):
        raise ConfigError(f"{key}={name!r} is not a device: {_KINDS}") from None
    if dev.type == "cpu":
        return torch.device("cpu")
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise ConfigError(
                f"{key}={name!r}: this machine has no CUDA device (torch {torch.__version__}); "
                "use cpu"
            )
        count = torch.cuda.device_count()
        index = torch.cuda.current_device() if dev.index is None else dev.index
        if index >= count:
            raise ConfigError(
                f"{key}={name!r}: this machine has {count} CUDA device(s), "
                f"cuda:0 to cuda:{count - 1}; pick one of them"
            )
        return torch.device("cuda", index)
    if dev.type == "mps":
        if not torch.backends.mps.is_available():
            raise ConfigError(f"{key}={name!r}: MPS exists only on Apple silicon; use cpu")
        return torch.device("mps")
    raise ConfigError(f"{key}={name!r}: rltool does not run on {dev.type} devices; {_KINDS}")


@dataclass(frozen=True)
class Devices:
    """Requested devices, checked; None where the component stays where it is."""

    env: torch.device | None
    policy: torch.device | None
    storing: torch.device | None


def resolve_devices(
    device: str | None = None,
    env_device: str | None = None,
    policy_device: str | None = None,
    storing_device: str | None = None,
) -> Devices:
    """Applies the rules above to the ``collector.*`` values (strings or devices)."""
    if device is not None and (env_device is not None or policy_device is not None):
        given = "collector.env_device" if env_device is not None else "collector.policy_device"
        raise ConfigError(
            f"collector.device={str(device)!r} and {given} are both set: device sets env and "
            "policy together; give either device or env_device / policy_device"
        )
    if device is not None:
        env_device = policy_device = device
    check = lambda v, key: None if v is None else check_device(str(v), f"collector.{key}")
    return Devices(
        env=check(env_device, "env_device" if device is None else "device"),
        policy=check(policy_device, "policy_device" if device is None else "device"),
        storing=check(storing_device, "storing_device"),
    )


def module_device(module: torch.nn.Module) -> torch.device:
    """Where a module's parameters live (cpu for a module without any)."""
    p = next(module.parameters(), None)
    return p.device if p is not None else torch.device("cpu")


def non_blocking(src: torch.device, dst: torch.device) -> bool:
    """Asynchronous copies only where CUDA is on one side (the reader synchronises)."""
    return "cuda" in (src.type, dst.type)


def synchronize(*devices: torch.device) -> None:
    """Waits for the pending copies of CUDA ``devices`` (before the CPU reads their results)."""
    for dev in devices:
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)
