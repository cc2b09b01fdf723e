// DispatchScenarios: the seeds' GCD scenarios (the Concurrency Programming Guide's "Dispatch
// Queues" and "Dispatch Sources", and the GCD articles): the photo store guarded by a concurrent
// queue with barrier writes, three downloads in a group (wait and notify on the main queue), a
// singleton made once, concurrentPerform, a semaphore guarding two resources, a countdown timer
// source that cancels itself; then what ThreadKit's pool adds: blocked workers replaced at once,
// QoS that orders work, a flood from many producers that never queues on the pool's lock, and a
// deadlock by sync reported instead of a hang.
import ChildProcessRoles
import Glibc
import Synchronization
@_spi(Benchmarks) import ThreadKit

enum DispatchScenarios {
    static let all: [Scenario] = [
        photoStore, groupDownload, onceSingleton, concurrentPerform, twoResources,
        countdown, blockingPool, qosOrder, manyProducers, syncDeadlock,
    ]

    static let photoStore = Scenario(
        name: "gcd-photo-store", title: "a photo store: sync reads and barrier writes on a custom concurrent queue",
        source: "GCD article: readers-writers with dispatch_barrier_async and dispatch_sync on a concurrent queue"
    ) { say in
        // safety: `photos` is read in sync blocks and written in barrier blocks of `queue`, which
        // never overlap.
        final class PhotoStore: @unchecked Sendable {
            let queue = TKDispatchQueue(label: "photo-store", attributes: .concurrent)
            private var photos: [String] = [] // read in sync blocks, written in barrier blocks of `queue`
            func add(_ photo: String) { queue.async(flags: .barrier) { self.photos.append(photo) } }
            var all: [String] { queue.sync { photos } }
        }
        let store = PhotoStore()
        let readers = Atomic<Int>(0)
        let shrank = Atomic<Int>(0)
        let group = TKDispatchGroup()
        for r in 0..<4 {
            TKDispatchQueue.global().async(group: group) {
                var last = 0
                for _ in 0..<2_000 {
                    let n = store.all.count
                    if n < last { shrank.wrappingAdd(1, ordering: .relaxed) }
                    last = n
                    readers.wrappingAdd(1, ordering: .relaxed)
                }
                if r == 0 { say.say("reader 0 finished its 2,000 reads; the last saw \(last) photos") }
            }
        }
        for i in 0..<500 { store.add("photo-\(i).jpg") }
        group.wait()
        let final = store.all
        say.say(
            "500 barrier writes and \(readers.load(ordering: .relaxed)) sync reads; final store: \(final.count) photos, first \(final.first ?? "-"), last \(final.last ?? "-")"
        )
        try say.check(final == (0..<500).map { "photo-\($0).jpg" }, "writes lost or reordered")
        try say.check(shrank.load(ordering: .relaxed) == 0, "a reader saw the store shrink")
        return "every read saw a consistent store; barrier writes ran one at a time, in order"
    }

    static let groupDownload = Scenario(
        name: "gcd-group-download", title: "three downloads in a group: wait, then notify on the main queue",
        source: "GCD article: dispatch_group_async × 3, dispatch_group_wait, dispatch_group_notify(main)"
    ) { say in
        let group = TKDispatchGroup()
        let finished = SharedBox<[String]>([]) // guarded by `lock`
        let lock = TKLock()
        let start = ContinuousClock.now
        for (name, ms) in [("a.png", 30), ("b.png", 10), ("c.png", 20)] {
            group.enter()
            TKDispatchQueue.global(qos: .utility).asyncAfter(deadline: start + .milliseconds(ms)) {
                lock.lock()
                finished.value.append(name)
                lock.unlock()
                say.say("downloaded \(name) after \(ms) ms (on a pool worker)")
                group.leave()
            }
        }
        let waited = group.wait(until: .now + .seconds(10))
        say.say("group.wait returned .\(waited) after \(Int((ContinuousClock.now - start) / .milliseconds(1))) ms")
        let notifiedOnMain = Atomic<Int>(0)
        group.notify(queue: .main) { notifiedOnMain.store(TKThread.isMainThread ? 1 : 2, ordering: .relaxed) }
        let deadline = ContinuousClock.now + .seconds(10)
        while notifiedOnMain.load(ordering: .relaxed) == 0 && ContinuousClock.now < deadline {
            TKRunLoop.main.run(mode: .default, before: .now + .milliseconds(20))
        }
        say.say("notify ran on the main queue (main thread: \(notifiedOnMain.load(ordering: .relaxed) == 1))")
        try say.check(waited == .success && finished.value.count == 3, "downloads missing: \(finished.value)")
        try say.check(notifiedOnMain.load(ordering: .relaxed) == 1, "notify did not run on the main thread")
        return "finished in completion order \(finished.value.joined(separator: ", ")); notify ran on the main thread"
    }

    static let onceSingleton = Scenario(
        name: "gcd-once", title: "a singleton made once while 100 queue items ask for it",
        source: "GCD article: dispatch_once for a shared instance"
    ) { say in
        // safety: `instance` is written once inside `once`, which publishes it to every caller.
        final class Holder: @unchecked Sendable {
            let once = TKOnce()
            var instance: String? // written once inside `once`
            let made = Atomic<Int>(0)
            var shared: String {
                once.run {
                    made.wrappingAdd(1, ordering: .relaxed)
                    instance = "the one manager"
                }
                return instance!
            }
        }
        let holder = Holder()
        let group = TKDispatchGroup()
        let wrong = Atomic<Int>(0)
        for _ in 0..<100 {
            TKDispatchQueue.global().async(group: group) {
                if holder.shared != "the one manager" { wrong.wrappingAdd(1, ordering: .relaxed) }
            }
        }
        group.wait()
        say.say("100 items on the pool read the singleton; its initializer ran \(holder.made.load(ordering: .relaxed))×")
        try say.check(
            holder.made.load(ordering: .relaxed) == 1 && wrong.load(ordering: .relaxed) == 0,
            "the singleton was made twice or read too early")
        return "made exactly once; every caller saw it fully made"
    }

    static let concurrentPerform = Scenario(
        name: "gcd-apply", title: "concurrentPerform spreads iterations over the workers, the caller helping",
        source: "Concurrency Programming Guide: dispatch_apply for loop iterations"
    ) { say in
        let n = 1_000_000
        let sum = Atomic<Int>(0)
        let threads = SharedBox<Set<pthread_t>>([]) // guarded by `lock`
        let lock = TKLock()
        let start = ContinuousClock.now
        TKDispatchQueue.concurrentPerform(iterations: 64) { chunk in
            var local = 0
            for i in stride(from: chunk, to: n, by: 64) { local &+= i }
            sum.wrappingAdd(local, ordering: .relaxed)
            lock.lock()
            threads.value.insert(pthread_self())
            lock.unlock()
        }
        let elapsed = ContinuousClock.now - start
        say.say("sum of 0..<\(n) in 64 chunks = \(sum.load(ordering: .relaxed)) in \(elapsed), on \(threads.value.count) threads")
        try say.check(sum.load(ordering: .relaxed) == n * (n - 1) / 2, "wrong sum")
        return "every iteration ran once; \(threads.value.count) threads took part (the caller included)"
    }

    static let twoResources = Scenario(
        name: "gcd-semaphore", title: "a semaphore of value 2 guards two printers shared by six jobs",
        source: "GCD article: dispatch_semaphore_create(2) limiting concurrent access to a resource pool"
    ) { say in
        let printers = TKDispatchSemaphore(value: 2)
        let busy = Atomic<Int>(0)
        let most = Atomic<Int>(0)
        let group = TKDispatchGroup()
        for job in 1...6 {
            TKDispatchQueue.global().async(group: group) {
                printers.wait()
                let now = busy.wrappingAdd(1, ordering: .relaxed).newValue
                if now > most.load(ordering: .relaxed) { most.store(now, ordering: .relaxed) }
                say.say("job \(job) prints (\(now) printer\(now == 1 ? "" : "s") busy)")
                TKThread.sleep(for: .milliseconds(10))
                busy.wrappingSubtract(1, ordering: .relaxed)
                printers.signal()
            }
        }
        group.wait()
        try say.check(most.load(ordering: .relaxed) <= 2, "more than two jobs printed at once")
        return "never more than \(most.load(ordering: .relaxed)) jobs printing at once; all six served"
    }

    static let countdown = Scenario(
        name: "gcd-countdown", title: "a repeating timer source counts down 5…1 and cancels itself",
        source: "Dispatch Sources: dispatch_source_set_timer, a countdown (here 20 ms per tick) and its cancel handler"
    ) { say in
        let queue = TKDispatchQueue(label: "countdown")
        let timer = TKDispatchSource.makeTimerSource(queue: queue)
        let left = SharedBox(5) // queue only
        let done = TKDispatchSemaphore(value: 0)
        let start = ContinuousClock.now
        let early = Atomic<Int>(0)
        timer.schedule(deadline: start + .milliseconds(20), repeating: .milliseconds(20))
        timer.setEventHandler {
            let tick = 5 - left.value + 1
            if ContinuousClock.now < start + .milliseconds(20 * tick) { early.wrappingAdd(1, ordering: .relaxed) }
            say.say("+\(Int((ContinuousClock.now - start) / .milliseconds(1))) ms: \(left.value)")
            left.value -= 1
            if left.value == 0 { timer.cancel() }
        }
        timer.setCancelHandler {
            say.say("cancel handler: lift-off")
            done.signal()
        }
        timer.activate()
        let ok = done.wait(until: .now + .seconds(10)) == .success
        try say.check(ok && early.load(ordering: .relaxed) == 0, "the countdown did not finish, or a tick was early")
        return "five ticks, none early; the cancel handler ran once"
    }

    static let blockingPool = Scenario(
        name: "gcd-blocking-pool", title: "8 items that each block 1 s in a semaphore finish in about 1 s",
        source:
            "ThreadKit's pool: a worker parked in a ThreadKit wait is replaced at once (libdispatch on Linux adds one thread per second)"
    ) { say in
        let never = TKDispatchSemaphore(value: 0)
        let group = TKDispatchGroup()
        let start = ContinuousClock.now
        for _ in 0..<8 { TKDispatchQueue.global().async(group: group) { _ = never.wait(until: .now + .seconds(1)) } }
        group.wait()
        let elapsed = ContinuousClock.now - start
        say.say(
            "all 8 done after \(elapsed) (a pool that only counted cores would need \(8 / 2) s on 2 cores; libdispatch here: about 8 s)")
        try say.check(elapsed < .milliseconds(1_500), "took \(elapsed)")
        return "the pool started a worker the moment one blocked"
    }

    static let qosOrder = Scenario(
        name: "gcd-qos", title: "an interactive item submitted behind 400 background items starts first",
        source: "Concurrency Programming Guide: quality of service classes (real on Linux here: run queues per QoS)"
    ) { say in
        let finished = Atomic<Int>(0)
        let seen = Atomic<Int>(-1)
        let group = TKDispatchGroup()
        for _ in 0..<400 {
            TKDispatchQueue.global(qos: .background).async(group: group) {
                let end = ContinuousClock.now + .microseconds(200)
                while ContinuousClock.now < end {}
                finished.wrappingAdd(1, ordering: .relaxed)
            }
        }
        TKDispatchQueue.global(qos: .userInteractive).async(group: group) {
            seen.store(finished.load(ordering: .relaxed), ordering: .relaxed)
        }
        group.wait()
        say.say("when the interactive item started, \(seen.load(ordering: .relaxed)) of 400 background items had finished")
        try say.check(seen.load(ordering: .relaxed) < 200, "the interactive item waited behind the background work")
        return "higher QoS starts first; background work runs at nice 10 on its own workers"
    }

    static let manyProducers = Scenario(
        name: "gcd-many-producers", title: "8 producer threads flood the global queues at every QoS: no shared lock per item",
        source:
            "ThreadKit's pool on many cores (issue 24): producers stage into per-thread shards and touch the pool's lock only to wake a worker"
    ) { say in
        let producers = 8
        let perProducer = 25_000
        let levels: [TKQualityOfService] = [.background, .utility, .default, .userInitiated, .userInteractive]
        let ran = Atomic<Int>(0)
        let group = TKDispatchGroup()
        let before = TKPoolIntrospection.poolLockAcquisitions
        let bySubmittersBefore = TKPoolIntrospection.poolLockAcquisitionsBySubmitters
        let threads = (0..<producers).map { p in
            TKThread(name: "producer-\(p)") {
                for i in 0..<perProducer {
                    TKDispatchQueue.global(qos: levels[(p + i) % levels.count]).async(group: group) {
                        ran.wrappingAdd(1, ordering: .relaxed)
                    }
                }
            }
        }
        for thread in threads { thread.start() }
        for thread in threads { thread.join() }
        let done = group.wait(until: .now + .seconds(60)) == .success
        let locks = TKPoolIntrospection.poolLockAcquisitions - before
        let bySubmitters = TKPoolIntrospection.poolLockAcquisitionsBySubmitters - bySubmittersBefore
        let total = producers * perProducer
        say.say(
            "pool width \(TKPoolIntrospection.width) (TK_CPU_BUDGET=16 makes it 16 on any machine), thread cap "
                + "\(TKPoolIntrospection.threadCap) per tier")
        say.say(
            "\(ran.load(ordering: .relaxed)) of \(total) items ran; the pool's lock was taken \(locks) times "
                + "(\(locks * 1_000 / total) per 1,000 items): by workers picking the next job (one pick per job while "
                + "five levels compete, QoS order being exact), and \(bySubmitters) times by a submission that woke a worker")
        try say.check(done && ran.load(ordering: .relaxed) == total, "items were lost or the pool stalled")
        return "every item ran once; producers never queued on a process-wide lock"
    }

    static let syncDeadlock = Scenario(
        name: "gcd-sync-deadlock", title: "sync onto the queue you are running on is reported, not a silent hang",
        source: "GCD article: dispatch_sync on the current serial queue deadlocks (libdispatch: SIGILL, no message)"
    ) { say in
        let child = try ChildLauncher("dispatch-sync-current", [], captureStandardError: true)
        let (status, standardError) = child.waitCapturingStandardError()
        // The diagnostic is the line carrying ThreadKit's misuse banner; whatever else the runtime
        // adds on a crash (a backtrace, register dumps) is not narrated.
        let diagnostic = standardError.split(separator: "\n").map(String.init).filter { $0.contains("ThreadKit misuse:") }
        let shown = diagnostic.first.map { line in line.firstRange(of: "ThreadKit misuse:").map { String(line[$0.lowerBound...]) } ?? line }
        say.say("a child process calls queue.sync from inside the serial queue \"photos\"; its standard error:")
        say.say("  \(shown ?? "(no ThreadKit diagnostic)")")
        say.say("the child ended with status \(status) (\(status > 128 ? "signal \(status - 128)" : "exit"))")
        try say.check(status != 0, "the deadlock went unnoticed")
        try say.check(
            shown.map { $0.contains("\"photos\"") && $0.contains("sync") && $0.contains("Fix:") } ?? false,
            "the child's standard error carries no diagnostic naming the queue and the fix: \(standardError)")
        return "stopped at once with a message naming the queue and the fix"
    }
}
