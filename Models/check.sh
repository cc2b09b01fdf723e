#!/usr/bin/env bash
# Models/check.sh: model-checks the dispatch pool's wake, staging, admission, staged-level, idle-word and local-queue protocols and the run
# loop's wake protocol with spin (Models/README.md).
# Needs spin and a C compiler; installs nothing (CI installs spin). Works in a temporary
# directory: no pan.* or trail files land in the repository. Fails when a model that must be
# clean reports an error or an incomplete search, or when a known-buggy variant (one wake slot for
# both tiers; a holder that looks only at its own tier's flag after unlocking; a nested run that
# does not hand back the wake-ups it took; the admission rule's holes) is NOT caught. About two minutes on 2 cores,
# under 1.5 GB of memory.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
CC=${CC:-gcc}
command -v spin >/dev/null || { echo "check.sh: spin is not installed (Debian: apt-get install spin)"; exit 1; }
command -v "$CC" >/dev/null || { echo "check.sh: no C compiler ($CC)"; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
start=$SECONDS
reports=()

# verify NAME MODEL EXPECT DEFINES SEARCH: prints one report; creates $work/failed when the
# result is not the expected one.
#   EXPECT: "clean", or a regular expression the violation pan reports must match.
#   SEARCH: safety, or cycles (non-progress cycles); -long: pan.c compiled at -O2.
verify() {
    local name=$1 model=$2 expect=$3 defines=$4 search=$5
    # pan.c takes ~12 s to compile at -O2 and ~2 s at -O0, which runs ~1.4 times slower: -O2 only
    # where the search is long.
    local cflags="-O0" panflags="-m10000 -w24"
    [[ $search == *-long ]] && cflags="-O2"
    case $search in
        safety*) cflags+=" -DSAFETY -DCOLLAPSE" ;;
        cycles*) cflags+=" -DNP -DCOLLAPSE" panflags="-l $panflags" ;;
        *) echo "FAIL  $name: no search \"$search\""; touch "$work/failed"; return ;;
    esac
    local dir="$work/$name" t0=$SECONDS
    mkdir -p "$dir"
    cp "$here/$model" "$dir/"
    # shellcheck disable=SC2086 # the flag lists are word-split on purpose
    if ! (cd "$dir" && spin -a $defines "$model" >spin.log 2>&1 && $CC -w $cflags -o pan pan.c >cc.log 2>&1); then
        echo "FAIL  $name: spin -a or the compilation of pan failed"; cat "$dir/spin.log" "$dir/cc.log" 2>/dev/null || true
        touch "$work/failed"; return
    fi
    # shellcheck disable=SC2086
    (cd "$dir" && ./pan $panflags >pan.out 2>&1) || true   # pan's exit status says nothing useful
    local out="$dir/pan.out" errors states depth secs
    errors=$(sed -n 's/.*errors: \([0-9]*\).*/\1/p' "$out" | tail -1)
    states=$(awk '/states, stored/ {print $1; exit}' "$out")
    depth=$(sed -n 's/.*depth reached \([0-9]*\).*/\1/p' "$out" | tail -1)
    secs=$((SECONDS - t0))
    # (pan stops at the first error, saying "Search not completed": only a clean run must finish)
    if [ -z "$errors" ] || grep -qE "out of memory|max search depth too small" "$out" \
        || { [ "$expect" = clean ] && grep -q "Search not completed" "$out"; }; then
        echo "FAIL  $name: the search did not complete"; tail -25 "$out"; touch "$work/failed"; return
    fi
    if [ "$expect" = clean ]; then
        if [ "$errors" -eq 0 ]; then
            printf 'ok    %-44s clean: %10s states, depth %4s, errors 0, %3ss\n' "$name" "$states" "$depth" "$secs"
        else
            echo "FAIL  $name: $errors error(s), expected none"; grep -E "^pan|violated" "$out" || true
            (cd "$dir" && spin -t $defines "$model" 2>&1 | grep -E "MSC|violated|assert" | tail -40) || true
            touch "$work/failed"
        fi
    else
        local violation
        violation=$(grep -m1 -E "^pan:[0-9]+: " "$out" || true)
        if [ "$errors" -gt 0 ] && grep -qE "$expect" <<<"$violation"; then
            printf 'ok    %-44s CAUGHT as expected after %s states, %ss: %s\n' "$name" "$states" "$secs" "${violation#pan:*: }"
            echo "      the trail (spin -t):"
            (cd "$dir" && spin -t $defines "$model" 2>&1 | grep -E "MSC:|text of failed" | sed -e 's/^ *//' -e 's/^MSC: /        /' -e 's/^spin: text of failed assertion: /        failed: /') || true
        else
            echo "FAIL  $name: the known bug was NOT caught (errors: $errors; ${violation:-no violation})"
            touch "$work/failed"
        fi
    fi
}

# run ...: verify in the background, two at a time (2 cores), each report kept for printing in order.
run() {
    while [ "$(jobs -rp | wc -l)" -ge 2 ]; do wait -n || true; done
    local report="$work/report.${#reports[@]}"
    reports+=("$report")
    verify "$@" >"$report" 2>&1 &
}

# PoolWake: one tier, the staging handshake, step 4's skip on the mirrors.
run "PoolWake W=2 NP=2 J=2 (no cycles)"     PoolWake.pml  clean ""                   cycles-long
run "PoolWake W=2 NP=2 J=2 (safety)"        PoolWake.pml  clean ""                   safety-long
run "PoolWake W=3 NP=2 J=1 (safety)"        PoolWake.pml  clean "-DW=3 -DJ=1"        safety
# PoolWedge: two tiers, a stage flag per tier; one wake slot per tier (the fix) must be clean...
run "PoolWedge per-tier slots (safety)"     PoolWedge.pml clean ""                   safety-long
# ...with a width of 1, where a holder leaves a tier's raised flag to its one busy worker
# (background, background, normal, normal), and with two producers (normal, normal; background)...
run "PoolWedge W=1 B,B,N,N (safety)"        PoolWedge.pml clean "-DW=1 -DNWN=1 -DNWB=1 -DJ0=4 -DT0=3" safety
run "PoolWedge W=1 B,B,N,N (no cycles)"     PoolWedge.pml clean "-DW=1 -DNWN=1 -DNWB=1 -DJ0=4 -DT0=3" cycles
run "PoolWedge two producers (safety)"      PoolWedge.pml clean "-DTWO_PRODUCERS -DJ0=2 -DNWN=1" safety
run "PoolWedge two producers (no cycles)"   PoolWedge.pml clean "-DTWO_PRODUCERS -DJ0=2 -DNWN=1" cycles
# ...and a holder that looks after unlocking only at the tiers it drained must be caught (the
# other producer's background job is stranded)...
run "PoolWedge OWN_TIER_ONLY (bug: stranded job)" PoolWedge.pml "assertion violated \(ran==" "-DTWO_PRODUCERS -DJ0=2 -DNWN=1 -DOWN_TIER_ONLY" safety
# ...also when workers drain both tiers at lock time (as the monitor and other holders do)...
run "PoolWedge DRAIN_ALL (safety)"          PoolWedge.pml clean "-DDRAIN_ALL"        safety-long
# ...and one slot for both tiers (the wedge of 2026-11-25, workers draining both tiers then) must be caught: first as a lost
# searcher, then (checking job completion only) as a job that never runs.
run "PoolWedge ONE_SLOT (bug: lost searcher)" PoolWedge.pml "assertion violated .*searching" "-DONE_SLOT -DDRAIN_ALL" safety
run "PoolWedge ONE_SLOT (bug: stranded job)"  PoolWedge.pml "assertion violated \(ran=="   "-DONE_SLOT -DDRAIN_ALL -DONLY_JOBS" safety
# Admission: the background admission rule across the stage (a background job never starts while
# normal work submitted before it waits, staged or queued) must be clean; each hole found in it on
# 2026-11-28 must be caught, and so must the background worker's two loads in the wrong order.
adm_bug="assertion violated \(before==0\)"
run "Admission (safety)"                    Admission.pml clean ""                   safety
run "Admission HELPS=3 (safety)"            Admission.pml clean "-DHELPS=3"          safety
# Larger sizes: a second background worker that may steal the first's local job, a second
# producer, both (the largest: about 50 s and 1.4 GB)...
run "Admission THIEF HELPS=3 (safety)"      Admission.pml clean "-DTHIEF -DHELPS=3"  safety
run "Admission SECOND_PRODUCER (safety)"    Admission.pml clean "-DSECOND_PRODUCER"  safety
run "Admission THIEF SECOND_PRODUCER (safety)" Admission.pml clean "-DTHIEF -DSECOND_PRODUCER" safety
# ...and a thief that steals without the admission rule must be caught.
run "Admission STEAL_WITHOUT_RULE (bug: thief)" Admission.pml "$adm_bug" "-DTHIEF -DSTEAL_WITHOUT_RULE" safety
run "Admission DRAIN_OWN_TIER_ONLY (bug: ci78)"  Admission.pml "$adm_bug" "-DDRAIN_OWN_TIER_ONLY" safety
run "Admission PRECHECK_OWN_TIER (bug: 02e67d9)" Admission.pml "$adm_bug" "-DPRECHECK_OWN_TIER"   safety
run "Admission LOCAL_NO_STAGE_LOOK (bug: local)" Admission.pml "$adm_bug" "-DLOCAL_NO_STAGE_LOOK" safety
run "Admission NO_DRAINING_MARK (bug: window)"   Admission.pml "$adm_bug" "-DNO_DRAINING_MARK"    safety
run "Admission MIRROR_FIRST (bug: load order)"   Admission.pml "$adm_bug" "-DMIRROR_FIRST"        safety
# StagedLevels: the stage's level hint (a staged job keeps its level's bit until a drain moves it)
# must be clean with two and three producers and drainers; a drainer that clears after its look
# must be caught.
run "StagedLevels NP=2 ND=2 (safety)"       StagedLevels.pml clean ""              safety
run "StagedLevels NP=3 ND=3 (safety)"       StagedLevels.pml clean "-DNP=3 -DND=3" safety
run "StagedLevels CLEAR_AFTER_LOOK (bug)"   StagedLevels.pml "assertion violated" "-DCLEAR_AFTER_LOOK" safety
# PoolIdleWord: the producer's wake without the pool's lock (the idle word and the idle stack's own
# lock; issue 48, docs/journal/2026-11-29-idle-word.md) must be clean at two sizes; an idle worker
# that resets its event after pushing itself, one that loads `pending` before its word RMW, and a
# producer that claims without looking again under the idle lock must each be caught.
run "PoolIdleWord W=2 NP=2 J=2 (safety)"    PoolIdleWord.pml clean ""            safety-long
run "PoolIdleWord W=3 NP=2 J=1 (safety)"    PoolIdleWord.pml clean "-DW=3 -DJ=1" safety
run "PoolIdleWord W=3 NP=2 J=1 (no cycles)" PoolIdleWord.pml clean "-DW=3 -DJ=1" cycles
run "PoolIdleWord RESET_AFTER_PUSH (bug)"   PoolIdleWord.pml "assertion violated" "-DRESET_AFTER_PUSH" safety
run "PoolIdleWord PENDING_BEFORE_WORD (bug)" PoolIdleWord.pml "assertion violated" "-DPENDING_BEFORE_WORD" safety
run "PoolIdleWord NO_RECHECK (bug)"         PoolIdleWord.pml "assertion violated \(stackSize>0\)" "-DNO_RECHECK" safety
# LocalQueue: a worker's local queue (tokio's ring: the owner pushes and pops without a lock,
# thieves claim and release by two compare-exchanges on the packed head) loses no job, runs none
# twice and never overwrites a claimed slot, with two thieves (steal-half, steal-all) and the ring
# wrapping, and the LIFO slot beside it; a full check against the real head, a one-phase steal, a
# steal-all that takes the LIFO job without a compare-exchange, and an owner that fills the slot
# while it is being taken must each be caught.
run "LocalQueue CAP=4 N=5 ring (safety)"    LocalQueue.pml clean "-DNO_LIFO -DN=5 -DHALF_STEALS=1" safety-long
run "LocalQueue CAP=2 N=4 LIFO (safety)"    LocalQueue.pml clean "-DCAP=2 -DN=4 -DHALF_STEALS=1" safety-long
run "LocalQueue FULL_AGAINST_REAL (bug)"    LocalQueue.pml "assertion violated \(buf" "-DFULL_AGAINST_REAL" safety
run "LocalQueue ONE_PHASE_STEAL (bug)"      LocalQueue.pml "assertion violated \(buf" "-DONE_PHASE_STEAL" safety
run "LocalQueue LIFO_PLAIN_TAKE (bug)"      LocalQueue.pml "assertion violated" "-DLIFO_PLAIN_TAKE" safety
run "LocalQueue FILL_WHILE_TAKING (bug)"    LocalQueue.pml "assertion violated" "-DFILL_WHILE_TAKING" safety
# RunLoopWake: a run loop's wake-up across a nested run; without the nested run's hand-back (the
# CI wedge of ci13 and ci32) the enclosing run must be caught asleep with a block queued.
run "RunLoopWake nested hand-back (safety)" RunLoopWake.pml clean ""                 safety
run "RunLoopWake NO_HANDBACK (bug: sleeps on)" RunLoopWake.pml "invalid end state" "-DNO_HANDBACK" safety

wait
cat "${reports[@]}"
if [ -e "$work/failed" ]; then echo "Models/check.sh: FAILED ($((SECONDS - start))s)"; exit 1; fi
echo "Models/check.sh: all models behave as expected ($((SECONDS - start))s)"
