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
 * wrap (a few pushes), the ring does: the owner pushes N > CAP values. check.sh runs the ring
 * alone (-DNO_LIFO) at CAP=4, N=5, and with the LIFO slot at CAP=2, N=4 (0.6 GB each; the LIFO
 * slot at CAP=4, N=5 takes 85 M states and 3.9 GB).
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
 * The LIFO slot (`lifo`, `lstate`: 0 empty, 1 full, 2 taking): the owner pushes either at the
 * tail or as the newest job (`pushNewest`: a job in the slot moves to the tail, or, while
 * `stealAll` is taking the slot's job, the new one goes to the tail), and pops with `popNext`
 * (the slot first, at most LIMIT times in a row; past that the slot's job moves to the tail and
 * the ring's oldest goes first). The owner takes the slot back by a compare-exchange full ->
 * empty; `stealAll` claims it by one full -> taking, moves it out, and stores empty. Properties:
 * the cell is never filled while it holds a job, never read empty, and the values above hold.
 *
 * Known-bad variants that check.sh requires to be caught:
 * -DFULL_AGAINST_REAL: the owner's full check counts from the real head: it overwrites a slot
 *   a thief has claimed and not moved out yet.
 * -DONE_PHASE_STEAL: the thief moves both heads in its claim (no release step): the owner sees
 *   the claimed slots as free and overwrites them.
 * -DLIFO_PLAIN_TAKE: `stealAll` takes the slot's job by a load and a store instead of a
 *   compare-exchange: it and the owner both take it.
 * -DFILL_WHILE_TAKING: the owner fills the slot whenever it is not full, also while `stealAll`
 *   is still moving the old job out.
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

#ifndef LIMIT
#define LIMIT 2 /* LIFO jobs in a row (3 in the code; 2 reaches the same states sooner) */
#endif

byte buf[CAP];      /* 0: no live entry */
byte lifo = 0;      /* the LIFO slot's job; 0: none */
byte lstate = 0;    /* 0 empty, 1 full, 2 taking */
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

/* The owner's push of value x at the tail; the caller checked that a slot is free. */
inline ringPush(x) {
    t = tail;
    assert(buf[t % CAP] == 0);   /* the slot is free: no live or claimed entry there */
    buf[t % CAP] = x;
    tail = t + 1                /* the release store */
}

/* The owner's take of the LIFO slot: compare-exchange full -> empty; v = the job, or 0. */
inline takeLifo() {
    atomic {
        if
        :: lstate == 1 -> lstate = 0; ok = 1
        :: else -> ok = 0
        fi
    };
    if
    :: ok -> d_step { assert(lifo != 0); v = lifo; lifo = 0 }
    :: else -> v = 0
    fi
}

/* The owner's pop at the head: v = the job, or 0 when the ring is empty. */
inline ringPop() {
    v = 0;
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
        :: ok -> d_step { v = buf[r % CAP]; buf[r % CAP] = 0 }; break
        :: else -> skip
        fi
    od
}

/* popNext: v = the job, or 0 when the owner holds none. */
inline popNext() {
    v = 0;
    if
    :: streak < LIMIT ->
        takeLifo();
        if
        :: v != 0 -> streak++; goto popped
        :: else -> skip
        fi
    :: else ->
        if
        :: tail - steal < CAP ->
            takeLifo();
            if
            :: v != 0 -> ringPush(v)
            :: else -> skip
            fi
        :: else -> skip
        fi
    fi;
    streak = 0;
    ringPop();
    if
    :: v == 0 ->
        takeLifo();
        if
        :: v != 0 -> streak = 1
        :: else -> skip
        fi
    :: else -> skip
    fi;
popped: skip
}

proctype Owner() {
    byte s, r, t, v, ns, nr, streak;
    bit ok;
    do
    :: pushed < N ->
        /* acceptsPush: a ring slot is free */
        s = steal;          /* the acquire load of head */
#ifdef FULL_AGAINST_REAL
        if
        :: tail - real < CAP -> skip
#else
        if
        :: tail - s < CAP -> skip
#endif
        :: else ->
            /* full: the shared path runs it */
            pushed++; runJob(pushed); goto next
        fi;
        pushed++;
        if
        :: true -> ringPush(pushed)
#ifndef NO_LIFO
        :: true ->
            /* pushNewest */
#ifdef FILL_WHILE_TAKING
            if
            :: lstate == 1 ->
#else
            if
            :: lstate != 0 ->
#endif
                takeLifo();
                if
                :: v != 0 -> ringPush(v)
                :: else -> ringPush(pushed); goto next
                fi
            :: else -> skip
            fi;
            assert(lifo == 0);  /* the cell holds no job */
            lifo = pushed;
            lstate = 1          /* the release store */
#endif
        fi;
next:   skip
    :: true ->
        popNext();
        if
        :: v != 0 -> runJob(v)
        :: else -> skip
        fi
    :: pushed == N -> break
    od;
    /* drain what is left to the owner */
    do
    :: true ->
        popNext();
        if
        :: v != 0 -> runJob(v)
        :: else -> break
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
done:   if
        :: all ->
            /* stealAll takes the LIFO slot's job too */
#ifdef LIFO_PLAIN_TAKE
            if
            :: lstate == 1 -> skip
            :: else -> goto taken
            fi;
            lstate = 2;
#else
            atomic {
                if
                :: lstate == 1 -> lstate = 2
                :: else -> goto taken
                fi
            };
#endif
            d_step { assert(lifo != 0); v = lifo; lifo = 0 };
            runJob(v);
            lstate = 0;     /* the release store */
taken:      skip
        :: else -> skip
        fi
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
    assert(steal == real && real == tail && lstate == 0 && lifo == 0);
    v = 1;
    do
    :: v > N -> break
    :: else -> assert(ran[v] == 1); v++
    od
}
