// LockScenarios: the lock scenarios of the seeds (Threading Programming Guide, "Synchronization";
// the CSDN article on locks): condition-lock producer/consumer, recursive lock, NSCondition
// producer/consumer, reader/writer store, @synchronized with two tokens, OSAtomic listing 4-1.
import ThreadKit

enum LockScenarios {
    static let all: [Scenario] = [atomics]

    static let atomics = Scenario(
        name: "atomics", title: "OSAtomic operations and Listing 4-1's test-and-set values",
        source: "Threading Programming Guide, Listing 4-1; CSDN article, OSAtomicAdd64 … OSAtomicTestAndSet"
    ) { say in
        let num = TKAtomicInt64(10)
        num.add(20)
        let added = num.add(20, barrier: true)
        say.say("num = 10; add(20); add(20, barrier) → \(added)   (seed: 50)")
        try say.check(added == 50, "add gave \(added), expected 50")
        let counter = TKAtomicInt64(10)
        counter.increment()
        let incremented = counter.increment(barrier: true)
        say.say("num = 10; increment twice → \(incremented)   (seed: 12)")
        try say.check(incremented == 12, "increment gave \(incremented)")
        let down = TKAtomicInt64(10)
        down.decrement()
        let decremented = down.decrement(barrier: true)
        say.say("num = 10; decrement twice → \(decremented)   (seed: 8)")
        try say.check(decremented == 8, "decrement gave \(decremented)")
        let swapped = TKAtomicInt64(10)
        let ok = swapped.compareAndSwap(expected: 10, desired: 20)
        let notOK = TKAtomicInt64(10)
        let refused = notOK.compareAndSwap(expected: 11, desired: 20)
        say.say("CAS(10→20) on 10 → \(ok), value \(swapped.load());  CAS(11→20) on 10 → \(refused), value \(notOK.load())")
        try say.check(ok && swapped.load() == 20 && !refused && notOK.load() == 10, "compare-and-swap misbehaved")

        say.say("Listing 4-1 (bit n is 0x80 >> (n & 7) of byte n >> 3):")
        let theValue = TKAtomicInt32(0)
        theValue.testAndSet(bit: 0)
        let v0 = theValue.load()
        say.say("  theValue = 0; testAndSet(0)  → \(v0)   (Apple: 128)")
        theValue.store(0)
        theValue.testAndSet(bit: 7)
        let v7 = theValue.load()
        say.say("  theValue = 0; testAndSet(7)  → \(v7)   (Apple: 1)")
        theValue.store(0)
        theValue.testAndSet(bit: 15)
        let v15 = theValue.load()
        say.say("  theValue = 0; testAndSet(15) → \(v15)   (Apple: 256)")
        let cas1 = theValue.compareAndSwap(expected: 256, desired: 512)
        let after1 = theValue.load()
        say.say("  compareAndSwap(256, 512) → \(cas1), theValue \(after1)   (Apple: 512)")
        let cas2 = theValue.compareAndSwap(expected: 256, desired: 1024)
        let after2 = theValue.load()
        say.say("  compareAndSwap(256, 1024) → \(cas2), theValue \(after2)   (Apple: still 512)")
        try say.check(v0 == 128 && v7 == 1 && v15 == 256 && cas1 && after1 == 512 && !cas2 && after2 == 512,
                      "Listing 4-1 values differ")
        return "every value matches the seed and Apple's Listing 4-1"
    }
}
