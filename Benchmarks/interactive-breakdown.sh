#!/bin/bash
# interactive-breakdown.sh: splits the start latency of the "interactive behind background" row
# into its parts, for ThreadKit's pool and libdispatch, with the kernel's own scheduler events.
#
#   [TKBENCH=path] Benchmarks/interactive-breakdown.sh [CPUS] [N]     (default: CPUS 0-1, N 300)
#
# For each side, `tkbench interactive-samples` runs N items of the row pinned to CPUS and writes
# when each interactive item was submitted and when it started (CLOCK_MONOTONIC); `perf sched
# record -k CLOCK_MONOTONIC` records the scheduler's events on the same clock. Each latency is
# then split into:
#   submit      submitted → the kernel's sched_waking of the worker that runs it (the pool's
#               submit path and the futex wake's entry)
#   wake → cpu  sched_waking → the sched_switch onto a CPU; "local" when the worker was woken
#               onto the waker's own CPU, "remote" when onto another (a reschedule interrupt to
#               a CPU busy with a background worker; through the hypervisor on a VM)
#   cpu → start the switch → the item's first instruction (the futex return, the pool's pop)
# Needs perf (with sched tracepoints readable: root, or perf_event_paranoid ≤ -1) and python3.
# Build first: swift build -c release --package-path Benchmarks.
set -euo pipefail
cpus=${1:-0-1}
n=${2:-300}
here=$(cd "$(dirname "$0")" && pwd)
bench=${TKBENCH:-"$here/.build/release/tkbench"}   # TKBENCH: another build, for an A/B
[ -x "$bench" ] || { echo "build first: swift build -c release --package-path Benchmarks" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

for side in ours theirs; do
    perf sched record -q -k CLOCK_MONOTONIC -o "$work/$side.data" -- \
        taskset -c "$cpus" "$bench" interactive-samples "$side" "$n" "$work/$side.txt" >/dev/null 2>&1
    perf script -i "$work/$side.data" --ns 2>/dev/null | grep -E "sched_switch|sched_waking" > "$work/$side.events"
    python3 - "$side" "$work/$side.txt" "$work/$side.events" <<'EOF'
import bisect, re, sys
side, samples_path, events_path = sys.argv[1:]
# The threads that run the interactive item: ThreadKit's normal-tier workers (tk.dispatch.N), or
# libdispatch's non-background root-queue threads (their names end in "-qos").
def is_worker(name):
    if side == "ours":
        return re.match(r"tk\.dispatch\.\d", name) is not None
    return name.endswith("qos") and "background" not in name
events = []
for line in open(events_path):
    m = re.match(r"\s*\S+\s+\d+\s+\[(\d+)\]\s+([\d.]+):\s+(\S+):\s+(.*)", line)
    if not m:
        continue
    cpu, when, event, rest = int(m.group(1)), int(round(float(m.group(2)) * 1e9)), m.group(3), m.group(4)
    if event.startswith("sched:sched_waking"):
        name = re.search(r"comm=(\S+)", rest).group(1)
        target = re.search(r"target_cpu=(\d+)", rest)
        if is_worker(name) and target:
            events.append((when, "waking", int(target.group(1)) == cpu))
    elif event.startswith("sched:sched_switch"):
        if is_worker(re.search(r"next_comm=(\S+)", rest).group(1)):
            events.append((when, "on-cpu", False))
events.sort()
times = [e[0] for e in events]
parts = {"latency": [], "submit": [], "wake → cpu": [], "  local": [], "  remote": [], "cpu → start": []}
for line in open(samples_path):
    submitted, started = map(int, line.split())
    parts["latency"].append((started - submitted) / 1e3)
    i, waking, oncpu = bisect.bisect_left(times, submitted), None, None
    while i < len(events) and events[i][0] <= started and oncpu is None:
        if events[i][1] == "waking" and waking is None:
            waking = events[i]
        elif events[i][1] == "on-cpu" and waking is not None:
            oncpu = events[i]
        i += 1
    if waking and oncpu:
        parts["submit"].append((waking[0] - submitted) / 1e3)
        parts["wake → cpu"].append((oncpu[0] - waking[0]) / 1e3)
        parts["  local" if waking[2] else "  remote"].append((oncpu[0] - waking[0]) / 1e3)
        parts["cpu → start"].append((started - oncpu[0]) / 1e3)
print(f"{side}: {len(parts['latency'])} items, {len(parts['submit'])} with a worker woken for them "
      f"({len(parts['  local'])} local, {len(parts['  remote'])} remote); µs p10 / p50 / p90")
for name, values in parts.items():
    if values:
        v = sorted(values)
        p = lambda q: v[min(len(v) - 1, int(len(v) * q))]
        print(f"  {name:12} {p(0.1):7.1f} {p(0.5):7.1f} {p(0.9):7.1f}")
EOF
done
