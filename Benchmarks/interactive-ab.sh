#!/bin/bash
# interactive-ab.sh: compares the start latency of the "interactive behind background" row between
# builds of tkbench, in alternated short chunks so that every build sees the same minutes of a
# noisy VM (compare builds within one invocation, not across two).
#
#   Benchmarks/interactive-ab.sh CPUS ROUNDS N TKBENCH...     (e.g. 1 30 100 /tmp/before /tmp/after)
#
# Each round runs `tkbench interactive-samples ours N` once per build, in the order given, then
# `interactive-samples theirs N` (libdispatch) once with the first build, all pinned to CPUS.
# The row itself (5–7 rounds of 30 items) and a couple of `perf sched` runs
# (interactive-breakdown.sh) could not tell a microsecond apart here (docs/DispatchPool.md, "One
# flag per tier"). Prints, per build:
# the median of all samples pooled, the median and range of the chunk medians, and how many
# paired chunks the second build won against the first. Each chunk's first sample is dropped
# (the pool's threads start in it). Build first: swift build -c release --package-path Benchmarks.
set -euo pipefail
[ $# -ge 4 ] || { sed -n '2,15p' "$0" >&2; exit 2; }
cpus=$1 rounds=$2 n=$3
shift 3
builds=("$@")
for b in "${builds[@]}"; do [ -x "$b" ] || { echo "not an executable: $b" >&2; exit 1; }; done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

for ((i = 1; i <= rounds; i++)); do
    for ((k = 0; k < ${#builds[@]}; k++)); do
        taskset -c "$cpus" "${builds[$k]}" interactive-samples ours "$n" "$work/$k-$i.txt" >/dev/null
    done
    taskset -c "$cpus" "${builds[0]}" interactive-samples theirs "$n" "$work/theirs-$i.txt" >/dev/null
done

python3 - "$work" "$rounds" "${builds[@]}" <<'EOF'
import statistics, sys
work, rounds, builds = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
keys = [str(k) for k in range(len(builds))] + ["theirs"]
names = builds + ["libdispatch"]

def latencies(key, i):
    out = []
    with open(f"{work}/{key}-{i}.txt") as f:
        for line in f:
            submitted, started = line.split()
            out.append((int(started) - int(submitted)) / 1000)
    return out[1:]

chunks = {k: [latencies(k, i) for i in range(1, rounds + 1)] for k in keys}
medians = {k: [statistics.median(c) for c in chunks[k]] for k in keys}
for k, name in zip(keys, names):
    pooled = statistics.median([x for c in chunks[k] for x in c])
    m = medians[k]
    print(f"{name}: pooled p50 {pooled:.2f} µs; chunk medians {statistics.median(m):.2f} "
          f"({min(m):.2f}–{max(m):.2f}); ratio to libdispatch (median of chunk ratios) "
          f"{statistics.median([a / b for a, b in zip(m, medians['theirs'])]):.3f}")
if len(builds) >= 2:
    wins = sum(1 for a, b in zip(medians["0"], medians["1"]) if b < a)
    print(f"{builds[1]} faster than {builds[0]} in {wins} of {rounds} paired chunks")
EOF
