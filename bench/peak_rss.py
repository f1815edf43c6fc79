"""peak_rss.py - runs a command and reports its wall time and the peak resident memory of its whole
process tree, for bench/peers.sh (converters that start helper processes are measured whole;
GNU time's "Maximum resident set size" is the largest single process's).

Every 50 ms it walks /proc for the command's descendants (by parent pid) and sums their VmRSS; the
peak is the largest such sum, or the largest single process's VmHWM (its own peak, exact between
polls) when that is larger. A child is counted from its exec on: between fork and exec its pages
are its parent's (copy-on-write, or the very same memory after vfork), which a sum would count
twice (ONNX Runtime GenAI's builder runs `git rev-parse` so). Pages two running programs share are
counted once per process that maps them, as RSS does. A process that lives less than 50 ms may be
missed; the command itself is polled until it exits.

usage: python3 bench/peak_rss.py OUT_JSON LOG_FILE -- COMMAND [ARG...]
  Writes {"wall_s", "peak_rss_mib", "largest_process_mib", "processes", "exit_code"} to OUT_JSON,
  the command's stdout and stderr to LOG_FILE, and exits with the command's exit code.
"""

import json
import os
import resource
import subprocess
import sys
import time


def status_kib(pid: int) -> tuple[int, int]:
    """VmRSS and VmHWM of a process, in KiB (0, 0 once it is gone)."""
    rss = hwm = 0
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    rss = int(line.split()[1])
                elif line.startswith("VmHWM:"):
                    hwm = int(line.split()[1])
    except OSError:
        pass
    return rss, hwm


PF_FORKNOEXEC = 0x40  # a task's flags: forked, not exec'd yet


def descendants(root: int) -> list[int]:
    """The root and every live process below it, less the children that have not exec'd yet."""
    parent, forked = {}, set()
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        # the fields after the command name, which may hold spaces and parentheses
        fields = stat[stat.rfind(b")") + 2 :].split()
        parent[int(name)] = int(fields[1])
        if int(fields[6]) & PF_FORKNOEXEC:
            forked.add(int(name))
    tree, frontier = [root], [root]
    while frontier:
        frontier = [p for p, pp in parent.items() if pp in frontier]
        tree += frontier
    return [p for p in tree if p == root or p not in forked]


def main() -> None:
    argv = sys.argv[1:]
    if len(argv) < 4 or argv[2] != "--":
        sys.exit("usage: python3 bench/peak_rss.py OUT_JSON LOG_FILE -- COMMAND [ARG...]")
    out_json, log_file, cmd = argv[0], argv[1], argv[3:]
    seen, peak_sum = set(), 0
    hwm = {}
    with open(log_file, "wb") as log:
        t0 = time.monotonic()
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        while True:
            total = 0
            for pid in descendants(proc.pid):
                rss, h = status_kib(pid)
                total += rss
                seen.add(pid)
                hwm[pid] = max(hwm.get(pid, 0), h)
            peak_sum = max(peak_sum, total)
            if proc.poll() is not None:
                break
            time.sleep(0.05)
        wall = time.monotonic() - t0
    # The largest single process's own peak, exact even if it peaked between polls: the kernel's
    # maximum over the reaped descendants (what GNU time reports), or a polled VmHWM.
    peak_one = max([resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss] + list(hwm.values()))
    res = {
        "wall_s": round(wall, 3),
        "peak_rss_mib": round(max(peak_sum, peak_one) / 1024, 1),
        "largest_process_mib": round(peak_one / 1024, 1),
        "processes": len(seen),
        "exit_code": proc.returncode,
    }
    with open(out_json, "w") as f:
        json.dump(res, f)
        f.write("\n")
    sys.exit(proc.returncode)


if __name__ == "__main__":
    main()
