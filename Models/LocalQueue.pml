/* LocalQueue.pml: a pool worker's local queue (Sources/ThreadKit/Dispatch/Pool/LocalQueue.swift,
 * docs/DispatchPool.md, "Local queues and stealing"), after tokio's queue.rs. A ring of CAP slots;
 * `head` packs (steal, real), `tail` is the owner's. The owner pushes at the tail (full when
 * tail - steal == CAP: the job then goes to the shared path) and pops at the head with a
 * compare-exchange; a thief claims the older half (`stealHalf`) or all (`stealAll`, the monitor
 * and `willPark`'s give-back) by a compare-exchange that moves `real` and keeps `steal`, moves the
 * entries out, and releases the claim by a second compare-exchange that sets steal = real.
 *
 * Each load, store and compare-exchange is one atomic step (the Swift code's orderings are
 * acquire/release on these words; the model assumes sequential consistency). Positions do not
 * wrap (a few pushes), the ring does: the owner pushes N > CAP values.
 *
 * Properties:
 * - no slot is written while it holds an entry not moved out yet (a claimed one included);
 * - no entry is lost or run twice: at the end every value 1..N was run (popped, stolen, or sent
 *   to the shared path) exactly once, and every move out reads a live entry.
 *
 * Two thieves race the owner without any lock between them (in the pool thieves hold the pool's
 * lock, so this is more than the pool needs): one steals half HALF_STEALS times, one steals all
 * once.
 *
 * Known-bad variants that check.sh requires to be caught:
 * -DFULL_AGAINST_REAL: the owner's full check counts from the real head: it overwrites a slot
 *   a thief has claimed and not moved out yet.
 * -DONE_PHASE_STEAL: the thief moves both heads in its claim (no release step): the owner sees
 *   the claimed slots as free and overwrites them.
 */
#ifndef CAP
#define CAP 4
#endif
#ifndef HALF_STEALS
#define HALF_STEALS 2 /* steal-half attempts by the first thief */
#endif
#ifndef N
#define N 6
#endif

byte buf[CAP];      /* 0: no live entry */
byte steal = 0;
byte real = 0;
byte tail = 0;
byte ran[N + 1];    /* how many times each value was run */
byte pushed = 0;    /* values pushed or overflowed so far */

inline runJob(v) {
    assert(v != 0);
    d_step { ran[v] = ran[v] + 1 }
}

/* A compare-exchange of `head`: expects (es, er), stores (ns, nr); on failure reloads (es, er). */
inline cas(es, er, ns, nr, ok) {
    atomic {
        if
        :: steal == es && real == er -> steal = ns; real = nr; ok = 1
        :: else -> es = steal; er = real; ok = 0
        fi
    }
}

proctype Owner() {
    byte s, r, t, v, ns, nr;
    bit ok;
    do
    :: pushed < N ->
        /* push */
        s = steal;          /* the acquire load of head */
        t = tail;
#ifdef FULL_AGAINST_REAL
        if
        :: t - real < CAP -> skip
#else
        if
        :: t - s < CAP -> skip
#endif
        :: else ->
            /* full: the shared path runs it */
            pushed++; runJob(pushed); goto next
        fi;
        pushed++;
        assert(buf[t % CAP] == 0);   /* the slot is free: no live or claimed entry there */
        buf[t % CAP] = pushed;
        tail = t + 1;       /* the release store */
next:   skip
    :: true ->
        /* pop */
        atomic { s = steal; r = real };
        t = tail;
        do
        :: r == t -> break   /* empty */
        :: else ->
            if
            :: s == r -> ns = r + 1
            :: else -> ns = s
            fi;
            nr = r + 1;
            cas(s, r, ns, nr, ok);
            if
            :: ok ->
                d_step { v = buf[r % CAP]; buf[r % CAP] = 0 };
                runJob(v);
                break
            :: else -> skip
            fi
        od
    :: pushed == N -> break
    od;
    /* drain what is left to the owner */
    do
    :: true ->
        atomic { s = steal; r = real };
        if
        :: r == tail -> break
        :: else ->
            if
            :: s == r -> ns = r + 1
            :: else -> ns = s
            fi;
            nr = r + 1;
            cas(s, r, ns, nr, ok);
            if
            :: ok -> d_step { v = buf[r % CAP]; buf[r % CAP] = 0 }; runJob(v)
            :: else -> skip
            fi
        fi
    od
}

/* all: 1 for stealAll, else stealHalf. */
proctype Thief(bit all; byte times) {
    byte s, r, t, n, i, v, got, k;
    bit ok;
    k = 0;
    do
    :: k == times -> break
    :: else ->
        k++;
        atomic { s = steal; r = real };
        do
        :: s != r -> goto done       /* a claim in flight: take nothing */
        :: else ->
            t = tail;               /* the acquire load of tail */
            n = t - r;
            if
            :: !all -> n = n - n / 2
            :: else -> skip
            fi;
            if
            :: n == 0 -> goto done
            :: else -> skip
            fi;
#ifdef ONE_PHASE_STEAL
            cas(s, r, r + n, r + n, ok);
#else
            cas(s, r, s, r + n, ok);
#endif
            if
            :: ok -> break
            :: else -> skip
            fi
        od;
        /* move the claimed entries out: [r, r + n) */
        i = 0;
        do
        :: i == n -> break
        :: else ->
            d_step { v = buf[(r + i) % CAP]; buf[(r + i) % CAP] = 0 };
            runJob(v);
            i++
        od;
#ifndef ONE_PHASE_STEAL
        /* release: steal catches up with real (which the owner may have moved) */
        s = r; r = r + n;
        do
        :: true ->
            got = real;
            cas(s, r, got, got, ok);
            if
            :: ok -> break
            :: else -> assert(s != r)   /* the claim is still ours to release */
            fi
        od;
#endif
done:   skip
    od
}

init {
    byte v;
    atomic {
        run Owner();
        run Thief(0, HALF_STEALS);
        run Thief(1, 1)
    }
    (_nr_pr == 1);
    /* every value ran exactly once */
    assert(steal == real && real == tail);
    v = 1;
    do
    :: v > N -> break
    :: else -> assert(ran[v] == 1); v++
    od
}
