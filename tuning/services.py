"""Which tuning daemons run on the system: read from ``<root>/proc/*/comm``.

Going through the root prefix (not systemd, not psutil) keeps the answer about
the system being tuned, so a test's fake tree decides it, never the machine the
test runs on.
"""

from __future__ import annotations

from tuning.sysfs import SysRoot

# The kernel keeps 15 characters of a process name (TASK_COMM_LEN 16), so
# "power-profiles-daemon" shows up as "power-profiles-".
_COMM_LEN = 15

TUNED = "tuned"
POWER_PROFILES = "power-profiles-daemon"
IRQBALANCE = "irqbalance"
WATCHED = (TUNED, POWER_PROFILES, IRQBALANCE)


def running_services(fs: SysRoot, names: tuple[str, ...] = WATCHED) -> frozenset[str]:
    """The subset of ``names`` that has a process."""
    wanted = {name[:_COMM_LEN]: name for name in names}
    found: set[str] = set()
    try:
        pids = [p for p in fs.listdir("/proc") if p.isdigit()]
    except OSError:
        return frozenset()
    for pid in pids:
        try:
            comm = fs.read_value(f"/proc/{pid}/comm")
        except OSError:
            continue  # the process exited while we looked
        if comm in wanted:
            found.add(wanted[comm])
    return frozenset(found)
