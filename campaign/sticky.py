"""CUDA errors after which a worker's process cannot use its device again: the row that met one is marked, the
worker sends what it has and exits with STICKY_EXIT, and the pool starts a fresh process (campaign.pool, ray_pool)."""
from __future__ import annotations

from fuzz.verdicts import Verdict

STICKY_EXIT = 3  # a worker's exit status after a sticky device error: its rows are sent, start a fresh one

_STICKY = ("illegal memory access", "device-side assert", "unspecified launch failure", "misaligned address",
           "an illegal instruction")


def sticky_device_error(message: str) -> bool:
    """CUDA errors after which the process's CUDA context cannot be used again."""
    return any(s in message for s in _STICKY)


def sticky_crash(row: dict) -> bool:
    """Whether the row is a crash with a sticky device error: nothing more can run on this process's device."""
    return row["verdict"] == Verdict.CRASH.value and sticky_device_error(row.get("message", ""))


class StickyDeviceError(Exception):
    """Raised after a sticky device error was reported: the process must end (status STICKY_EXIT)."""
