// LockScenarios: the lock scenarios of the seeds (Threading Programming Guide, "Synchronization";
// the CSDN article on locks): NSLock's tryLock / lockBeforeDate: while computing, condition-lock
// producer/consumer, recursive lock, NSCondition
// producer/consumer, reader/writer store, @synchronized with two tokens, OSAtomic listing 4-1.
import ChildProcessRoles
import Synchronization
import ThreadKit

enum LockScenarios {
    static let all: [Scenario] = [keepComputing, conditionLock, recursiveLock, condition, readWriteStore, synchronizedTokens, atomics]

    /// Items moved by the producer/consumer scenarios: enough to hand off thousands of times.
    static let itemCount = 10_000

    static let keepComputing = Scenario(
        name: "lock-keep-computing", title: "tryLock / lock(before:): keep computing until the lock is free, then update the display",
        source:
            "Threading Programming Guide, \"Using an NSLock Object\": if tryLock fails, do another increment of calculation; CSDN article, tryLock / lockBeforeDate:"
    ) { say in
        let theLock = TKLock()
        theLock.name = "display"
        // The display all threads update: the sum of their results so far. Guarded by theLock.
        let display = SharedBox<(total: Int, updates: Int, whileHeld: Int)>((0, 0, 0))
        let mainHoldsIt = Atomic<Bool>(false) // true while the main thread "redraws" under theLock
        let increments = 2_000
        let busyIncrements = [TKAtomicInt64(0), TKAtomicInt64(0)] // per thread: increments done because tryLock failed

        say.say("the main thread holds the lock (redrawing the display); two threads compute \(increments) increments each")
        theLock.lock()
        mainHoldsIt.store(true, ordering: .relaxed)
        let workers = (0..<2).map { w in
            SpawnedThread {
                var pending = 0
                for n in 1...increments {
                    pending += increment(n) // another increment of calculation
                    if theLock.tryLock() { // update the display only when the lock is free
                        if mainHoldsIt.load(ordering: .relaxed) { display.value.whileHeld += 1 }
                        display.value.total += pending
                        display.value.updates += 1
                        theLock.unlock()
                        pending = 0
                    } else {
                        busyIncrements[w].increment(barrier: false)
                    }
                }
                theLock.withLock { display.value.total += pending } // no more to do: the last result
            }
        }
        let deadline = ContinuousClock.now + .seconds(10)
        while busyIncrements.contains(where: { $0.load() < 10 }) && ContinuousClock.now < deadline { yieldCPU() }
        let busyWhileHeld = busyIncrements.map { Int($0.load()) }
        say.say(
            "while the lock was held: thread A computed \(busyWhileHeld[0]) increments, thread B \(busyWhileHeld[1]) — tryLock() said no, they kept working"
        )
        mainHoldsIt.store(false, ordering: .relaxed)
        theLock.unlock()
        workers.forEach { $0.join() }
        let expected = 2 * (1...increments).reduce(0) { $0 + increment($1) }
        let busy = busyIncrements.map { Int($0.load()) }
        say.say(
            "display updated \(display.value.updates) times; total \(display.value.total) (expected \(expected)); "
                + "increments computed while the lock was busy: \(busy[0]) + \(busy[1])")
        try say.check(
            busyWhileHeld.allSatisfy { $0 >= 10 } && display.value.whileHeld == 0,
            "a thread blocked, or updated the display while the lock was held")
        try say.check(display.value.total == expected, "results were lost: \(display.value.total) ≠ \(expected)")

        // lock(before:): wait a little for the lock; each time it times out, compute one more increment.
        theLock.lock()
        mainHoldsIt.store(true, ordering: .relaxed)
        let timeouts = Atomic<Int>(0)
        let early = Atomic<Int>(0)
        let gotItWhileHeld = Atomic<Bool>(true)
        let patient = SpawnedThread {
            var n = 0
            var pending = 0
            while true {
                let deadline = ContinuousClock.now + .milliseconds(2)
                if theLock.lock(before: deadline) { break }
                if ContinuousClock.now < deadline { early.wrappingAdd(1, ordering: .relaxed) }
                n += 1
                pending += increment(n)
                timeouts.wrappingAdd(1, ordering: .relaxed)
            }
            gotItWhileHeld.store(mainHoldsIt.load(ordering: .relaxed), ordering: .relaxed)
            display.value.total += pending
            theLock.unlock()
        }
        while timeouts.load(ordering: .relaxed) < 3 && ContinuousClock.now < deadline { TKThread.sleep(for: .milliseconds(1)) }
        mainHoldsIt.store(false, ordering: .relaxed)
        theLock.unlock()
        patient.join()
        say.say(
            "lock(before: now + 2 ms) timed out \(timeouts.load(ordering: .relaxed))× (never before its deadline: \(early.load(ordering: .relaxed) == 0)), "
                + "one increment computed after each; then it got the lock once the main thread let go")
        try say.check(
            timeouts.load(ordering: .relaxed) >= 3 && early.load(ordering: .relaxed) == 0 && !gotItWhileHeld.load(ordering: .relaxed),
            "lock(before:) returned early or acquired a held lock")
        return
            "\(busy[0] + busy[1]) increments computed instead of waiting; every result reached the display; lock(before:) waited its full deadline"
    }

    /// One increment of calculation: a few microseconds of arithmetic whose result is `n`.
    static func increment(_ n: Int) -> Int {
        var x: UInt64 = 0x9E37_79B9_7F4A_7C15 &+ UInt64(n)
        for _ in 0..<2_000 {
            x ^= x << 13
            x ^= x >> 7
            x ^= x << 17
        }
        return x == 0 ? 0 : n
    }

    static let conditionLock = Scenario(
        name: "condition-lock", title: "NSConditionLock producer/consumer with HAS_DATA / NO_DATA",
        source: "Threading Programming Guide, \"Using an NSConditionLock Object\"; CSDN article, TestLock.produceMessage"
    ) { say in
        let NO_DATA = 0
        let HAS_DATA = 1
        let condLock = TKConditionLock(condition: NO_DATA)
        let queue = SharedBox<[Int]>([]) // guarded by condLock
        let consumed = SharedBox<[Int]>([]) // the consumer's own list, read after join
        say.say("condLock = TKConditionLock(condition: NO_DATA); a producer and a consumer thread")
        let consumer = SpawnedThread {
            while consumed.value.count < itemCount {
                condLock.lock(whenCondition: HAS_DATA)
                let item = queue.value.removeFirst()
                let empty = queue.value.isEmpty
                condLock.unlock(withCondition: empty ? NO_DATA : HAS_DATA)
                consumed.value.append(item)
                if item <= 3 {
                    say.say(
                        "consumer: lock(whenCondition: HAS_DATA) → took item \(item), unlock(withCondition: \(empty ? "NO_DATA" : "HAS_DATA"))"
                    )
                }
            }
        }
        let producer = SpawnedThread {
            for item in 1...itemCount {
                condLock.lock()
                queue.value.append(item)
                condLock.unlock(withCondition: HAS_DATA)
                if item <= 3 { say.say("producer: lock() → added item \(item), unlock(withCondition: HAS_DATA)") }
            }
        }
        producer.join()
        consumer.join()
        say.say(
            "… \(itemCount) items produced; consumer received \(consumed.value.count); final condition \(condLock.condition == NO_DATA ? "NO_DATA" : "HAS_DATA")"
        )
        try say.check(consumed.value == Array(1...itemCount), "items lost, duplicated or out of order")
        try say.check(condLock.condition == NO_DATA, "the queue is empty but the condition is HAS_DATA")
        return "\(itemCount) items handed over once each, in order; the lock ends at NO_DATA"
    }

    static let recursiveLock = Scenario(
        name: "recursive-lock", title: "a recursive function taking the same NSRecursiveLock at every level",
        source: "Threading Programming Guide, \"Using an NSRecursiveLock Object\"; CSDN article, recursiveFunction"
    ) { say in
        let theLock = TKRecursiveLock()
        theLock.name = "theLock"
        let depth = Atomic<Int>(0)
        let maxDepth = Atomic<Int>(0)
        func myRecursiveFunction(_ value: Int) {
            theLock.lock()
            let d = depth.wrappingAdd(1, ordering: .relaxed).newValue
            maxDepth.max(d, ordering: .relaxed)
            say.say(String(repeating: "  ", count: d - 1) + "myRecursiveFunction(\(value)): lock taken, depth \(d)")
            if value != 0 { myRecursiveFunction(value - 1) }
            depth.wrappingSubtract(1, ordering: .relaxed)
            theLock.unlock()
        }
        myRecursiveFunction(5)
        let reached = maxDepth.load(ordering: .relaxed)
        let freeAfter = Atomic<Bool>(false)
        SpawnedThread {
            let got = theLock.tryLock()
            if got { theLock.unlock() }
            freeAfter.store(got, ordering: .relaxed)
        }.join()
        say.say("after the outermost unlock another thread's tryLock() → \(freeAfter.load(ordering: .relaxed))")
        try say.check(reached == 6, "expected 6 nested acquisitions, saw \(reached)")
        try say.check(freeAfter.load(ordering: .relaxed), "the lock was not released after balanced unlocks")
        return "6 nested acquisitions on one thread without deadlock; released after the last unlock"
    }

    static let condition = Scenario(
        name: "condition", title: "NSCondition producer/consumer: wait while empty, signal after adding",
        source: "CSDN article, \"使用NSCondition\": consumeProduct / generateProduct"
    ) { say in
        let condition = TKCondition()
        condition.name = "products"
        let products = SharedBox<[Int]>([]) // guarded by condition
        let consumed = SharedBox<[Int]>([]) // consumer-owned, read after join
        let waits = Atomic<Int>(0)
        let consumer = SpawnedThread {
            for _ in 1...itemCount {
                condition.lock()
                while products.value.isEmpty {
                    waits.wrappingAdd(1, ordering: .relaxed)
                    condition.wait()
                }
                let product = products.value.removeFirst()
                condition.unlock()
                consumed.value.append(product)
                if product <= 3 { say.say("consumeProduct: took product \(product)") }
            }
        }
        let producer = SpawnedThread {
            for product in 1...itemCount {
                condition.lock()
                products.value.append(product)
                if product <= 3 { say.say("generateProduct: added product \(product), signal()") }
                condition.signal()
                condition.unlock()
            }
        }
        producer.join()
        consumer.join()
        say.say("… \(itemCount) products; the consumer waited \(waits.load(ordering: .relaxed)) times on an empty list")
        try say.check(consumed.value == Array(1...itemCount), "products lost, duplicated or out of order")
        return "\(itemCount) products consumed once each, in order"
    }

    static let readWriteStore = Scenario(
        name: "read-write-store", title: "a store read by many threads and written by one (read-write lock)",
        source: "Threading Programming Guide, \"Read-write lock\"; CSDN article, 读写锁"
    ) { say in
        let lock = TKReadWriteLock()
        // The store's invariant: both fields always hold the same version.
        let store = SharedBox<(version: Int, copy: Int)>((0, 0)) // guarded by lock
        let readersInside = Atomic<Int>(0)
        let peakReaders = Atomic<Int>(0)
        let torn = Atomic<Int>(0)
        let writerSawReaders = Atomic<Int>(0)
        let writes = 2_000
        let readsPerThread = 20_000
        say.say("3 reader threads × \(readsPerThread) reads, 1 writer × \(writes) writes; the store's two fields must always agree")
        let readers = (1...3).map { _ in
            SpawnedThread {
                for _ in 0..<readsPerThread {
                    lock.withReadLock {
                        let inside = readersInside.wrappingAdd(1, ordering: .relaxed).newValue
                        peakReaders.max(inside, ordering: .relaxed)
                        let snapshot = store.value
                        if snapshot.version != snapshot.copy { torn.wrappingAdd(1, ordering: .relaxed) }
                        readersInside.wrappingSubtract(1, ordering: .relaxed)
                    }
                }
            }
        }
        let writer = SpawnedThread {
            for v in 1...writes {
                lock.withWriteLock {
                    if readersInside.load(ordering: .relaxed) != 0 { writerSawReaders.wrappingAdd(1, ordering: .relaxed) }
                    store.value.version = v
                    store.value.copy = v
                }
            }
        }
        writer.join()
        readers.forEach { $0.join() }
        say.say(
            "peak readers inside together: \(peakReaders.load(ordering: .relaxed)); torn reads: \(torn.load(ordering: .relaxed)); "
                + "writes that saw a reader inside: \(writerSawReaders.load(ordering: .relaxed)); final version \(store.value.version)")
        try say.check(torn.load(ordering: .relaxed) == 0 && writerSawReaders.load(ordering: .relaxed) == 0, "a writer overlapped a reader")
        try say.check(store.value.version == writes, "writes were lost")
        return "readers shared the lock (peak \(peakReaders.load(ordering: .relaxed)) at once), the writer always wrote alone"
    }

    static let synchronizedTokens = Scenario(
        name: "synchronized", title: "@synchronized with two tokens: different tokens run together, the same token excludes",
        source: "Threading Programming Guide, \"Using the @synchronized Directive\"; CSDN article, objc_sync_enter"
    ) { say in
        let anObj1 = Token(name: "anObj1")
        let anObj2 = Token(name: "anObj2")
        // Different tokens: thread A, inside synchronized(anObj1), waits for B to get inside
        // synchronized(anObj2). That can only finish if the two do not block each other.
        let bInside = Atomic<Bool>(false)
        let overlapped = Atomic<Bool>(false)
        let a = SpawnedThread {
            synchronized(anObj1) {
                say.say("thread A: inside synchronized(anObj1), waiting for B")
                let deadline = ContinuousClock.now + .seconds(10)
                while !bInside.load(ordering: .acquiring) && ContinuousClock.now < deadline { yieldCPU() }
                overlapped.store(bInside.load(ordering: .acquiring), ordering: .relaxed)
            }
        }
        let b = SpawnedThread {
            synchronized(anObj2) {
                say.say("thread B: inside synchronized(anObj2) at the same time")
                bInside.store(true, ordering: .releasing)
            }
        }
        a.join()
        b.join()
        try say.check(overlapped.load(ordering: .relaxed), "different tokens blocked each other")
        // Same token: two threads add to a counter inside synchronized(anObj1); none is lost.
        let counter = SharedBox(0)
        let perThread = 100_000
        let workers = (1...2).map { _ in SpawnedThread { for _ in 0..<perThread { synchronized(anObj1) { counter.value += 1 } } } }
        workers.forEach { $0.join() }
        say.say("two threads × \(perThread) increments inside synchronized(anObj1) → \(counter.value)")
        try say.check(counter.value == 2 * perThread, "increments were lost: the same token did not exclude")
        // A throwing body releases the lock.
        struct Oops: Error {}
        do { try synchronized(anObj1) { throw Oops() } } catch {
            say.say("a body that throws: the error propagates and the lock is released")
        }
        let free = Atomic<Bool>(false)
        SpawnedThread { synchronized(anObj1) { free.store(true, ordering: .relaxed) } }.join()
        try say.check(free.load(ordering: .relaxed), "the lock stayed held after the body threw")
        return "different tokens ran together, the same token excluded (\(2 * perThread) increments exact), a throw released it"
    }

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
        try say.check(
            v0 == 128 && v7 == 1 && v15 == 256 && cas1 && after1 == 512 && !cas2 && after2 == 512,
            "Listing 4-1 values differ")
        return "every value matches the seed and Apple's Listing 4-1"
    }
}
