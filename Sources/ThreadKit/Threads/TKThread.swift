// TKThread: NSThread on POSIX threads, with what Foundation's Thread gets wrong on Linux fixed:
// the name set before start() is the OS thread's name before any user code runs; QoS and
// priority really change the thread's scheduling; a bad stack size is refused with a TKError;
// joinable threads are joined before the process exits.
//
// Threads: every public member is thread-safe except `threadDictionary`, which belongs to the
// thread itself. `attributes` (name, QoS, priority, stack size, detached, lifecycle, pthread
// handle and kernel id, and the tasks awaiting its end) is guarded by its Protected lock;
// `finished` and `started` are ParkingEvents that joiners and early perform requests wait on;
// tasks awaiting `finished()` wait on an AsyncWaiters made by the first of them, closed right after
// `finished` is set (docs/Concurrency.md §4). Lifecycle: created → starting
// (start() called) → executing (set by the thread itself) → finished (set by the thread itself
// after willExit was posted, or by start() when the OS refused to create it).
import CThreadKit
import Glibc
import Synchronization

// safety: the attributes are `Protected`, the flags atomic or events; `exitRounds` is the
// exiting thread's only; `threadDictionary` belongs to the thread itself, as in Foundation.
/// A thread of the process, like `Thread` (`NSThread`), on POSIX threads: create it with a block
/// or subclass it and override ``main()``, set its name, stack size, QoS and priority, then
/// ``start()`` it.
///
/// Unlike Foundation's `Thread` on Linux, the name is the OS thread's name before any of your code
/// runs, QoS and priority really change the thread's scheduling, a bad stack size throws a
/// ``TKError``, and a non-detached thread can be joined (and is joined before the process exits
/// normally). Every member is thread-safe except ``threadDictionary``, which belongs to the thread
/// itself. Subclasses restate `@unchecked Sendable`.
open class TKThread: @unchecked Sendable {
    enum Lifecycle { case created, starting, executing, finished }

    /// What the thread runs: the subclass's main(), a block, or a throwing block.
    private enum Body {
        case subclass
        case block(@Sendable () -> Void)
        case throwing(@Sendable () throws -> Void)
    }

    struct Attributes {
        var lifecycle: Lifecycle
        // Scheduling fields: see TKThread+Scheduling.swift.
        var name: String?
        var stackSize = TKThread.defaultStackSize
        var qualityOfService: TKQualityOfService = .default
        var threadPriority = 0.5
        /// Which of QoS and priority was set last, and so decides the OS scheduling.
        var scheduling = SchedulingClass(.default)
        /// The class the OS thread inherits from the thread that started it (Linux copies policy
        /// and nice at clone): when equal to `scheduling`, nothing needs applying.
        var inherited = SchedulingClass(.default)
        var isDetached = true
        /// The kernel thread id; meaningful while `lifecycle == .executing` (and kept after).
        var tid: UInt32 = 0
        /// Adopted: a thread ThreadKit did not create, given an object by `current`.
        var adopted = false
        /// An object a higher layer attaches to the thread (its run loop), told when the thread
        /// finishes. Set while the thread runs; dropped when it finishes.
        var attachment: (any ThreadAttachment)?
        /// Tasks awaiting the thread's end (`finished()`): made by the first, taken and closed by
        /// the end.
        var finishWaiters: AsyncWaiters<Void>?
        /// The thread has really ended (its thread-local destructors ran): joiners are released.
        /// Set after `lifecycle` became `.finished`.
        var ended = false
    }

    static let defaultStackSize = 512 * 1024

    private let body: Body
    let attributes: Protected<Attributes>
    /// Set when the thread has finished; joiners wait on it. Releasing set: publishes
    /// everything the thread did to joiners.
    private let finished = ParkingEvent()
    /// Set when the thread is executing (or has finished, or failed to start): perform requests
    /// sent between start() and the thread's first step wait on it for the thread's tid.
    private let started = ParkingEvent()
    private let cancelled = Atomic<Bool>(false)
    /// Rounds of thread-local destructors seen at the thread's exit. The exiting thread only.
    private var exitRounds = 0

    /// The thread's own dictionary. Owned by the thread itself: read and write it only there.
    public var threadDictionary: [String: Any] = [:]

    // MARK: Creating

    /// For subclasses: override `main()`, then call `start()`.
    public init() {
        body = .subclass
        attributes = Protected(Attributes(lifecycle: .created))
    }

    private init(name: String?, body: Body) {
        self.body = body
        attributes = Protected(Attributes(lifecycle: .created, name: name))
    }

    /// A thread that runs `block` once started, like `Thread(block:)`; `name` is set before it runs.
    public convenience init(name: String? = nil, block: @escaping @Sendable () -> Void) {
        self.init(name: name, body: .block(block))
    }

    /// A thread whose block may throw: an error escaping it goes to `uncaughtErrorHandler`.
    public convenience init(name: String? = nil, throwing block: @escaping @Sendable () throws -> Void) {
        self.init(name: name, body: .throwing(block))
    }

    /// The object of a thread ThreadKit did not create (see `current`), made on that thread: its
    /// stack size is the one the thread really has (pthread_getattr_np).
    private init(adoptingCurrentThread tid: UInt32) {
        body = .subclass
        attributes = Protected(TKThread.adopted(tid, stackSize: Int(tk_current_stack_size())))
    }

    /// The main thread's object, which may be made on any thread: its stack size is the process's
    /// stack limit (RLIMIT_STACK), which is what the main thread's stack may grow to; `Int.max`
    /// when the limit is unlimited.
    private init(mainThread tid: UInt32) {
        body = .subclass
        var limit = rlimit()
        let size =
            getrlimit(__rlimit_resource_t(RLIMIT_STACK.rawValue), &limit) == 0 && limit.rlim_cur != ~rlim_t(0)
            ? Int(clamping: limit.rlim_cur) : Int.max
        attributes = Protected(TKThread.adopted(tid, stackSize: size))
    }

    /// The attributes of a running thread ThreadKit did not start: its scheduling is what it has.
    private static func adopted(_ tid: UInt32, stackSize: Int) -> Attributes {
        var a = Attributes(lifecycle: .executing, stackSize: stackSize, tid: tid, adopted: true)
        if let inForce = SchedulingClass.inForce(of: tid) {
            a.scheduling = inForce
            a.inherited = inForce
            a.threadPriority = inForce.priority
        }
        return a
    }

    /// Starts a detached thread running `block` and returns its object.
    @discardableResult
    public static func detachNewThread(name: String? = nil, _ block: @escaping @Sendable () -> Void) -> TKThread {
        let thread = TKThread(name: name, block: block)
        thread.start()
        return thread
    }

    /// The thread's entry point: runs the block. Subclasses override it; never call it directly.
    open func main() {
        switch body {
        case .subclass:
            break
        case .block(let block):
            block()
        case .throwing(let block):
            do { try block() } catch { TKThread.reportUncaught(error, on: self) }
        }
    }

    // MARK: Attributes

    /// The thread's name, also given to the OS (its first 15 bytes: /proc/…/comm, ps, gdb) before
    /// the thread runs any code, and again whenever it changes while the thread runs.
    public var name: String? {
        get { attributes.current.name }
        set {
            attributes.withLock { a in
                a.name = newValue
                if a.lifecycle == .executing { TKThread.applyOSName(newValue, to: a.tid) }
            }
        }
    }

    /// The stack size in bytes. For a thread ThreadKit starts: 512 KiB unless set with
    /// `setStackSize` before `start()`. For the main thread: the process's stack limit
    /// (RLIMIT_STACK; `Int.max` if unlimited). For a thread ThreadKit did not create: the size of
    /// its stack (pthread_getattr_np).
    public var stackSize: Int { attributes.current.stackSize }

    /// Sets the stack size for a thread not yet started. Throws `.invalidArgument` unless `bytes` is
    /// a multiple of 4096 and at least 16384, or when the thread has already started.
    public func setStackSize(_ bytes: Int) throws {
        guard bytes >= 16_384, bytes % 4096 == 0 else {
            // Rounded up without overflow: a size within 4 KiB of Int.max has no multiple above it.
            let suggestion = bytes > Int.max - 4095 ? Int.max & ~4095 : max(16_384, (bytes + 4095) / 4096 * 4096)
            throw TKError(
                .invalidArgument,
                "TKThread \(describe()).setStackSize(\(bytes)): a stack size must be a multiple "
                    + "of 4096 bytes and at least 16384. Fix: round up to a multiple of 4 KiB, e.g. \(suggestion).")
        }
        try attributes.withLock { a in
            guard a.lifecycle == .created else {
                throw TKError(
                    .invalidArgument,
                    "TKThread \(describe(a)).setStackSize(\(bytes)): the thread has already started. "
                        + "Fix: set the stack size before start().")
            }
            a.stackSize = bytes
        }
    }

    /// True (the default) for a detached thread; false makes it joinable: the process then waits for
    /// it before exiting normally. Set before `start()`, either way. After `start()`, setting true
    /// detaches the running thread as pthread_detach does (process exit no longer waits for it; it
    /// can still be joined); setting a detached thread back to false is a misuse (a detached
    /// pthread cannot be made joinable again).
    public var isDetached: Bool {
        get { attributes.current.isDetached }
        set {
            let refused = attributes.withLock { a -> String? in
                if a.lifecycle == .created || a.isDetached == newValue {
                    a.isDetached = newValue
                    return nil
                }
                guard newValue else { return describe(a) }
                a.isDetached = true
                // Lock order: attributes, then the joinable set (as in start()).
                JoinableThreads.shared.remove(self)
                return nil
            }
            if let name = refused {
                misuse(
                    "TKThread \(name).isDetached = false after start(): a started detached thread cannot be made "
                        + "joinable again (pthread_detach cannot be undone). Fix: set isDetached = false before start().")
            }
        }
    }

    // MARK: State

    /// Whether the thread is running its code: true from its first step until it posts
    /// `willExitNotification` and finishes.
    public var isExecuting: Bool { attributes.current.lifecycle == .executing }
    /// Whether the thread has finished (its `main()` returned, it called ``exit()``, or the OS
    /// refused to create it). Joiners may still be waiting for its thread-local destructors.
    public var isFinished: Bool { attributes.current.lifecycle == .finished }
    /// Whether ``cancel()`` has been called. Only a flag: the thread's code checks it and returns.
    public var isCancelled: Bool { cancelled.load(ordering: .relaxed) }

    /// Marks the thread cancelled. The thread's code decides what to do about it (NSThread's cancel).
    public func cancel() { cancelled.store(true, ordering: .relaxed) }

    /// Whether this is the process's initial thread.
    public var isMainThread: Bool { self === TKThread.main }

    // MARK: Starting and joining

    /// Starts the thread. Calling it a second time is a misuse that stops the process. When the
    /// OS refuses to create the thread (out of threads or memory: pthread_create's EAGAIN), the
    /// thread is finished without running and the failure goes to `uncaughtErrorHandler` (by
    /// default one line on standard error naming the thread and errno); `startOrThrow()` throws it
    /// instead.
    public func start() {
        do {
            try startOrThrow()
        } catch {
            TKThread.reportUncaught(error, on: self)
        }
    }

    /// As `start()`, but a thread the OS refuses to create throws a `TKError(.systemCall)` naming
    /// the thread, the stack size and pthread_create's errno (EAGAIN: the process or user is out
    /// of threads, RLIMIT_NPROC; ENOMEM/EINVAL: the stack cannot be mapped). The thread is then
    /// finished (joins return at once) and cannot be started again: make a new one to retry.
    public func startOrThrow() throws {
        let inherited = TKThread.current.attributes.current.scheduling
        let stackSize = attributes.withLock { a -> Int in
            guard a.lifecycle == .created else {
                misuse(
                    "TKThread \(describe(a)).start() called again: a thread runs once. "
                        + "Fix: create a new TKThread for each run.")
            }
            a.lifecycle = .starting
            a.inherited = inherited
            // Under the lock, so `isDetached = true` from another thread cannot slip in between.
            if !a.isDetached { JoinableThreads.shared.add(self) }
            return a.stackSize
        }
        TKThread.becomeMultiThreaded()
        do {
            try Self.spawn(self, stackSize: stackSize)
        } catch {
            markFinished()
            markEnded()
            throw error
        }
    }

    /// Waits until the thread has ended: returned from `main` (or called `exit()`), and run its
    /// TKThreadLocal destructors, as pthread_join promises. Works for detached and joinable
    /// threads alike; a thread joining itself is a misuse.
    public func join() {
        _ = join(deadline: nil)
    }

    /// As `join()`, giving up at `deadline`: false when the thread had not finished by then.
    public func join(until deadline: ContinuousClock.Instant) -> Bool {
        join(deadline: deadline)
    }

    private func join(deadline: ContinuousClock.Instant?) -> Bool {
        if finished.isSet { return true }
        if self === TKThread.currentIfKnown {
            misuse(
                "TKThread \(describe()).join() called on the thread itself: it would wait forever. "
                    + "Fix: join a thread from another thread.")
        }
        let waiting = WaitGraph.begin(self, .join, "TKThread.join()") // who waits for whom (§6)
        defer { WaitGraph.end(waiting) }
        return finished.wait(deadline: deadline, spinLimit: 0, observed: true, retryThreadStarts: true)
    }

    /// Whether the thread has ended (what `join` waits for). Acquiring: sees what the thread did.
    var isEnded: Bool { finished.isSet }

    /// Suspends the calling task until the thread has finished (returned from `main`, called
    /// `exit()`, or failed to start), whether it is detached or joinable; returns at once, without
    /// suspending, if it has. Never blocks a thread. A cancelled task stops waiting at once and
    /// throws `CancellationError`.
    public func finished() async throws {
        if finished.isSet { return }
        let waiters = attributes.withLock { a -> AsyncWaiters<Void>? in
            if a.ended { return nil }
            if let existing = a.finishWaiters { return existing }
            let made = AsyncWaiters<Void>()
            a.finishWaiters = made
            return made
        }
        guard let waiters else { return }
        try await waiters.wait()
    }

    /// Tasks waiting in `finished()` now (tests).
    var asyncWaiterCount: Int { attributes.withLock { $0.finishWaiters }?.count ?? 0 }

    // MARK: Running (on the new thread)

    /// Runs on the new thread: publish the object, apply name and scheduling, run, finish.
    fileprivate func run() {
        let tid = SystemCall.currentThreadID
        // Hang reports sample a thread's stack with a signal; a thread inherits its creator's mask.
        tk_hang_sampler_unblock_here()
        TKThread.startedThreadIDs.withLock { _ = $0.insert(tid) }
        TKThread.currentSlot.value = self
        // Applied under the lock so a concurrent rename or QoS change cannot be overwritten by
        // the values read here.
        attributes.withLock { a in
            a.tid = tid
            a.lifecycle = .executing
            if a.name != nil { TKThread.applyOSName(a.name, to: tid) }
            if a.scheduling != a.inherited { applySchedulingLocked(&a) }
        }
        markStarted()
        if DiagnosticsSwitch.isOn(.trace) { TraceRecorder.threadStarted(self) }
        main()
        finishCurrentThread()
    }

    /// Posts willExit on the exiting thread, then marks it finished. Its joiners are woken later,
    /// when its thread-local destructors have run (`threadLocalsDidExit`).
    fileprivate func finishCurrentThread() {
        TKNotificationCenter.default.post(name: TKThread.willExitNotification, object: self)
        if DiagnosticsSwitch.isOn(.trace) { TraceRecorder.threadFinished() }
        markFinished()
    }

    /// `isFinished` turns true and the attachment (the run loop) refuses further requests. Joiners
    /// are not woken yet: see `markEnded`.
    private func markFinished() {
        let (wasFinished, attachment) = attributes.withLock { a -> (Bool, (any ThreadAttachment)?) in
            defer {
                a.lifecycle = .finished
                a.attachment = nil
            }
            return (a.lifecycle == .finished, a.attachment)
        }
        if wasFinished { return }
        markStarted() // a thread that failed to start never did; wake anyone waiting for it
        attachment?.threadDidFinish()
    }

    /// The thread has really ended: wakes its joiners and the tasks awaiting `finished()`, and
    /// drops it from the threads the process waits for at exit. Once.
    private func markEnded() {
        let (wasEnded, detached, waiters) = attributes.withLock { a -> (Bool, Bool, AsyncWaiters<Void>?) in
            defer {
                a.ended = true
                a.finishWaiters = nil
            }
            return (a.ended, a.isDetached, a.finishWaiters)
        }
        if wasEnded { return }
        // Only a parked joiner costs a wake syscall.
        finished.set()
        // Tasks that took the list before `ended` was set; later ones see it.
        waiters?.close(returning: ())
        if !detached { JoinableThreads.shared.remove(self) }
    }

    /// The thread's last step, run by the C library at thread exit as the destructor of
    /// `currentSlot` (which every thread with an object holds). glibc runs the destructors of the
    /// keys holding values in rounds, in key order, and starts another round (up to
    /// PTHREAD_DESTRUCTOR_ITERATIONS, 4) while destructors set values. Until no other TKThreadLocal
    /// holds a value on this thread, this one sets itself again (so `TKThread.current` still
    /// answers inside the others' destructors) and waits for the next round; then the thread is
    /// ended: joiners see every TKThreadLocal destructor done, as pthread_join promises. In the
    /// last round it ends the thread in any case (values set then are dropped by glibc unrun).
    fileprivate func threadLocalsDidExit() {
        if attributes.current.adopted { markFinished() }
        exitRounds += 1
        if exitRounds < TKThread.destructorRounds && ThreadLocalKeys.anyValueSet(except: TKThread.currentSlot.key) {
            TKThread.currentSlot.value = self
            return
        }
        markEnded()
    }

    /// glibc's PTHREAD_DESTRUCTOR_ITERATIONS.
    private static let destructorRounds = 4

    /// Releasing: publishes the thread's tid and lifecycle to waiters.
    private func markStarted() { started.set() }

    /// The kernel ids of the threads ThreadKit started that may still exist (pruned against
    /// /proc/self/task when read; thread dumps list them, docs/Diagnostics.md §6).
    static let startedThreadIDs = Protected<Set<UInt32>>([])

    /// The process's threads, other than the main thread, that ThreadKit did not start (for
    /// TKConcurrency.installGlobalExecutor's "too late" check).
    static func threadsNotStartedByThreadKit() -> [UInt32] {
        var live: [UInt32] = []
        if let dir = opendir("/proc/self/task") {
            while let entry = readdir(dir) {
                let name = withUnsafeBytes(of: entry.pointee.d_name) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
                if let tid = UInt32(name) { live.append(tid) }
            }
            closedir(dir)
        }
        let main = UInt32(getpid())
        return startedThreadIDs.withLock { started in
            started.formIntersection(live)
            // The dump-signal thread (docs/Diagnostics.md §6) is ThreadKit's, started before main.
            return live.filter { $0 != main && $0 != tk_dump_signal_thread_id() && !started.contains($0) }.sorted()
        }
    }

    /// Whether start() was called and the thread has not yet begun executing.
    var isStarting: Bool { attributes.current.lifecycle == .starting }

    /// Waits (parked) until a started thread is executing or has finished.
    func waitUntilStarted() {
        _ = started.wait(spinLimit: 0, observed: true)
    }

    /// Creates the OS thread (always detached at the pthread level: joining goes through the
    /// `finished` word, so any TKThread can be joined, by any number of threads).
    private static func spawn(_ thread: TKThread, stackSize: Int) throws {
        var attr = pthread_attr_t()
        pthread_attr_init(&attr)
        defer { pthread_attr_destroy(&attr) }
        pthread_attr_setdetachstate(&attr, Int32(PTHREAD_CREATE_DETACHED))
        var r = pthread_attr_setstacksize(&attr, stackSize)
        if r == 0 {
            var handle = pthread_t()
            let context = Unmanaged.passRetained(thread).toOpaque()
            r = pthread_create(
                &handle, &attr,
                { raw in
                    Unmanaged<TKThread>.fromOpaque(raw!).takeRetainedValue().run()
                    return nil
                }, context)
            if r != 0 { Unmanaged<TKThread>.fromOpaque(context).release() }
        }
        if r != 0 {
            let fix =
                r == EAGAIN
                ? "end threads or raise the thread limit (RLIMIT_NPROC, /proc/sys/kernel/threads-max)"
                : "lower the stack size"
            throw TKError(
                .systemCall,
                "TKThread \(thread.describe()).start(): pthread_create failed with \(SystemCall.errnoName(r)) "
                    + "for a \(stackSize)-byte stack. Fix: \(fix), then start a new TKThread.", errno: r)
        }
    }

    // MARK: Naming for messages and the OS

    func describe() -> String { attributes.withLock { describe($0) } }

    func describe(_ a: Attributes) -> String {
        if let name = a.name { return "\"\(name)\"" }
        return a.tid != 0 ? "(thread \(a.tid))" : "\(ObjectIdentifier(self))"
    }

    /// The OS keeps 15 bytes of a thread name; cut on a UTF-8 character boundary.
    static func osName(_ name: String?) -> String {
        guard let name else { return "" }
        var bytes = 0
        var end = name.startIndex
        for index in name.unicodeScalars.indices {
            let length = name.unicodeScalars[index].utf8.count
            if bytes + length > 15 { break }
            bytes += length
            end = name.unicodeScalars.index(after: index)
        }
        return String(name.unicodeScalars[name.startIndex..<end])
    }

    /// Names kernel thread `tid` of this process. The caller holds `attributes` with the thread
    /// executing, so the thread cannot exit (and its id be reused) meanwhile.
    private static func applyOSName(_ name: String?, to tid: UInt32) {
        let os = osName(name)
        if tid == SystemCall.currentThreadID {
            _ = tk_thread_set_name(pthread_self(), os)
            return
        }
        // What pthread_setname_np does for another thread, without needing its pthread_t (which
        // ThreadKit does not have for adopted threads or for the main thread seen from elsewhere).
        let fd = open("/proc/self/task/\(tid)/comm", O_WRONLY)
        guard fd >= 0 else { return }
        _ = os.withCString { write(fd, $0, strlen($0)) }
        close(fd)
    }
}

// MARK: - The current thread, the main thread, multithreading

extension TKThread {
    /// The calling thread's object. For threads ThreadKit did not create, an object is made on
    /// first use and kept for the thread's life (the same object every time).
    public static var current: TKThread {
        if let thread = currentSlot.value { return thread }
        let tid = SystemCall.currentThreadID
        let thread = tid == UInt32(getpid()) ? main : TKThread(adoptingCurrentThread: tid)
        currentSlot.value = thread
        return thread
    }

    /// The process's initial thread.
    public static var main: TKThread { mainThread }

    /// Whether the calling thread is the process's initial thread, like `Thread.isMainThread`.
    public static var isMainThread: Bool { SystemCall.currentThreadID == UInt32(getpid()) }

    /// True once ThreadKit has started a secondary thread.
    public static func isMultiThreaded() -> Bool { multiThreaded.load(ordering: .acquiring) }

    /// Posted to `TKNotificationCenter.default` once, on the thread that starts the first secondary
    /// thread, before that thread runs (`NSWillBecomeMultiThreadedNotification`); the object is nil.
    public static let willBecomeMultiThreadedNotification: TKNotification.Name = "TKWillBecomeMultiThreadedNotification"
    /// Posted to `TKNotificationCenter.default` by a thread that is about to finish, on that
    /// thread, with the thread as the object (`NSThreadWillExitNotification`).
    public static let willExitNotification: TKNotification.Name = "TKThreadWillExitNotification"

    private static let mainThread = TKThread(mainThread: UInt32(getpid()))

    /// Each thread's object. Its destructor is the thread's last step (see `threadLocalsDidExit`).
    fileprivate static let currentSlot = TKThreadLocal<TKThread> { thread in
        thread.threadLocalsDidExit()
    }

    /// The calling thread's object if it has one already (never creates one).
    static var currentIfKnown: TKThread? { currentSlot.value }

    private static let multiThreaded = Atomic<Bool>(false)
    private static let multiThreadedOnce = OnceState()

    /// Posts willBecomeMultiThreaded once, on the thread starting the first secondary thread,
    /// before that thread runs. Concurrent first starts wait for the post to finish.
    fileprivate static func becomeMultiThreaded() {
        if multiThreaded.load(ordering: .acquiring) { return }
        multiThreadedOnce.run {
            TKNotificationCenter.default.post(name: willBecomeMultiThreadedNotification, object: nil)
            multiThreaded.store(true, ordering: .releasing)
        }
    }

    // MARK: Sleeping and exiting

    /// Blocks the calling thread until `deadline`; never returns early. Goes through ThreadKit's
    /// parking, so a pool sees the thread as blocked.
    public static func sleep(until deadline: ContinuousClock.Instant) {
        while Parking.park(sleepWord, expected: 0, deadline: deadline, retryThreadStarts: true) {}
    }

    /// Blocks for `duration` (zero, negative: returns at once).
    public static func sleep(for duration: Duration) {
        sleep(until: ContinuousClock.now + duration)
    }

    /// Nobody ever changes or wakes this word: sleepers park on it until their deadline.
    private static let sleepWord = FutexWord(0)

    /// Ends the calling thread: posts willExit on it, marks it finished, and exits the OS thread
    /// (pthread_exit). Called on the main thread, the process lives on until its other threads end.
    /// As Apple's `+exit` warns, the thread's frames are not unwound: what they hold (this thread's
    /// own object, retained by the frame that runs it, included) is never released; thread-local
    /// values are.
    public static func exit() -> Never {
        current.finishCurrentThread() // no local: this frame holds nothing when the thread ends
        pthread_exit(nil)
    }

    // MARK: Uncaught errors

    /// Receives errors escaping a throwing thread block, and start failures. The default writes one
    /// line naming the thread to standard error; the process keeps running.
    public static var uncaughtErrorHandler: @Sendable (TKThread, any Error) -> Void {
        get { errorHandler.current }
        set { errorHandler.current = newValue }
    }

    private static let errorHandler = Protected<@Sendable (TKThread, any Error) -> Void> { thread, error in
        var line = "ThreadKit: uncaught error in TKThread \(thread.describe()): \(error)\n"
        line.withUTF8 { _ = Glibc.write(2, $0.baseAddress, $0.count) }
    }

    static func reportUncaught(_ error: any Error, on thread: TKThread) {
        uncaughtErrorHandler(thread, error)
    }
}

extension OnceState {
    /// TKOnce's body for statics that cannot hold a ~Copyable TKOnce.
    func run(_ body: () -> Void) {
        if word.pointer.pointee.load(ordering: .acquiring) == OnceState.done { return }
        runSlow(body)
    }
}

/// Something a higher layer keeps per thread (the thread's run loop), told once when the thread
/// has finished. Lets Threads notify RunLoop without depending on it.
protocol ThreadAttachment: AnyObject, Sendable {
    func threadDidFinish()
}

extension TKThread {
    /// The thread's attachment, made by `create` on first use while the thread is executing.
    /// Returns nil when the thread has not started or has finished. The attributes lock is held
    /// while `create` runs: it must not take other ThreadKit locks.
    func attachment<T: ThreadAttachment>(orCreate create: (UInt32) -> T) -> T? {
        attributes.withLock { a in
            guard a.lifecycle == .executing else { return nil }
            if let existing = a.attachment as? T { return existing }
            let made = create(a.tid)
            a.attachment = made
            return made
        }
    }
}
