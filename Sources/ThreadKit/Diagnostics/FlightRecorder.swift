// FlightRecorder: the trace kept as a flight recorder (docs/DiagnosticsTrace.md §8, issue 26
// item 3). `TK_DIAGNOSTICS=flight:30s` (or `TKTrace.startFlightRecorder(window:)`) records into
// the ordinary per-thread trace rings, whose memory is fixed by their budget (`totalCapacity`
// slots of 32 bytes, 2^19 = 16 MiB by default here, plus about 2.4 KiB of header and 2 KiB of
// minimum ring per live thread: TraceRecorder's bound), whatever the window or how long the
// process runs. The window only decides what a dump keeps: events older than it are left out, and
// in flight mode a ring whose thread exited and whose last event is older than the window is
// handed to a new thread first (TraceRecorder.reusableRetiredRingLocked).
//
// A dump writes the last `window` as Chrome trace-event JSON and the HTML timeline, both with the
// thread dump (`TKDiagnostics.threadDump()`), into two new files named
// `threadkit-flight-<pid>-<yyyymmdd-hhmmss>-<random>.json|html` (PrivateDirectory), and says so on stderr
// ("ThreadKit flight recorder: wrote …"). Triggers: a hang report (HangWatchdog, on the watchdog
// thread), a misuse stop (`misuse`, through `dumpBeforeMisuse`), the dump signal (its thread
// calls `dumpOnTrigger`), and `TKTrace.dumpFlight(to:)`. Automatic dumps go to `TK_FLIGHT_DIR`,
// else the current directory, at most `maximumAutomaticDumps` per process.
//
// Threads: any. `dumping` lets one dump run at a time (a trigger meeting another dump in progress
// is skipped and says so); `window` and `automaticDumps` are relaxed atomics (a configuration value
// and a count: no other data is published through them).
import CThreadKit
import Glibc
import Synchronization

enum FlightRecorder {
    /// Slots per thread in flight mode (16,384 × 32 bytes = 512 KiB).
    static let defaultCapacity = 16_384
    /// Slots all threads share in flight mode: 2^19 × 32 bytes = 16 MiB.
    static let defaultTotalCapacity = 1 << 19
    /// Automatic dumps (hangs, misuse, the signal) written at most per process.
    static let maximumAutomaticDumps = 16
    /// How long a misuse stop waits for its dump before the process stops anyway.
    static let misuseTimeout: Duration = .seconds(10)
    /// The environment variable naming the directory automatic dumps go to.
    static let directoryVariable = "TK_FLIGHT_DIR"

    /// The window in nanoseconds: TK_DIAGNOSTICS's `flight:DURATION` (30 s when not given), or
    /// the last `TKTrace.startFlightRecorder(window:)`.
    private static let windowNanoseconds = Atomic<Int64>(
        nanoseconds(DiagnosticsConfiguration.fromEnvironment.flightWindow ?? .seconds(30)))
    private static let dumping = Atomic<Bool>(false)
    private static let automaticDumps = Atomic<Int>(0)

    /// Whether the flight recorder is on (its bit and the trace's).
    static var isOn: Bool {
        DiagnosticsSwitch.current.isSuperset(of: [.flightRecorder, .trace])
    }

    /// The window a dump keeps.
    static var window: Duration { .nanoseconds(windowNanoseconds.load(ordering: .relaxed)) }

    static func setWindow(_ window: Duration) { windowNanoseconds.store(nanoseconds(window), ordering: .relaxed) }

    /// The window in force for ring reuse: nil when the flight recorder is off.
    static var activeWindowNanoseconds: UInt64? {
        isOn ? UInt64(max(0, windowNanoseconds.load(ordering: .relaxed))) : nil
    }

    static func nanoseconds(_ d: Duration) -> Int64 {
        let (seconds, attoseconds) = d.components
        let (product, overflow) = seconds.multipliedReportingOverflow(by: 1_000_000_000)
        return overflow ? .max : product &+ attoseconds / 1_000_000_000
    }

    // MARK: Triggers

    /// Writes a dump for `reason` (a hang, the dump signal) into the automatic directory, and
    /// says on stderr where it went or why it did not. Any thread; synchronous.
    static func dumpOnTrigger(reason: String) {
        guard isOn else { return }
        if automaticDumps.wrappingAdd(1, ordering: .relaxed).newValue > maximumAutomaticDumps {
            SystemCall.report(
                "ThreadKit flight recorder: not writing a dump for \(reason): \(maximumAutomaticDumps) were already written "
                    + "by this process (the limit of automatic dumps).")
            return
        }
        let directory = automaticDirectory
        do {
            guard let written = try write(to: directory, reason: reason) else {
                SystemCall.report("ThreadKit flight recorder: not writing a dump for \(reason): another dump is being written.")
                return
            }
            SystemCall.report(written.description)
        } catch {
            SystemCall.report("ThreadKit flight recorder: could not write the dump for \(reason): \(error)")
        }
    }

    /// Called by `misuse` on a thread about to stop the process: the dump is written by a plain
    /// pthread while this thread waits for it at most `misuseTimeout` (it may hold a lock the dump
    /// needs; then the process stops anyway, with partial files). Never re-entered: a misuse met
    /// while a dump is written (by the dump itself, say) skips it.
    static func dumpBeforeMisuse(_ message: String) {
        guard isOn, !dumping.load(ordering: .relaxed) else { return }
        let firstLine = message.split(separator: "\n", maxSplits: 1).first.map(String.init) ?? message
        let reason = "misuse: " + String(firstLine.prefix(300))
        let done = UnsafeMutablePointer<sem_t>.allocate(capacity: 1)
        sem_init(done, 0, 0)
        let job = MisuseDumpJob(reason: reason, done: done)
        var thread = pthread_t()
        // safety: the retained job is released by the thread (takeRetainedValue) exactly once.
        let started = pthread_create(
            &thread, nil,
            { argument in
                let job = Unmanaged<MisuseDumpJob>.fromOpaque(argument!).takeRetainedValue()
                FlightRecorder.dumpOnTrigger(reason: job.reason)
                sem_post(job.done)
                return nil
            }, Unmanaged.passRetained(job).toOpaque())
        guard started == 0 else {
            SystemCall.report(
                "ThreadKit flight recorder: could not start the thread that writes the dump (\(SystemCall.errnoName(started))).")
            return
        }
        pthread_detach(thread)
        var deadline = timespec()
        clock_gettime(CLOCK_REALTIME, &deadline)
        deadline.tv_sec += Int(misuseTimeout.components.seconds)
        while sem_timedwait(done, &deadline) != 0 {
            if errno == EINTR { continue }
            SystemCall.report(
                "ThreadKit flight recorder: the dump was not written within \(misuseTimeout.components.seconds) s; stopping "
                    + "anyway (its files may be partial).")
            return
        }
        // `done` is not freed: on a timeout the writer may still post it; the process stops next.
    }

    /// A misuse dump's arguments, handed to its thread.
    private final class MisuseDumpJob: @unchecked Sendable {
        // safety: immutable after init; `done` is a sem_t, safe to post from any thread.
        let reason: String
        let done: UnsafeMutablePointer<sem_t>
        init(reason: String, done: UnsafeMutablePointer<sem_t>) {
            self.reason = reason
            self.done = done
        }
    }

    /// `TK_FLIGHT_DIR`, else the current directory, as an absolute path when it can be made one.
    static var automaticDirectory: String {
        if let value = getenv(directoryVariable), value.pointee != 0 { return String(cString: value) }
        var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
        guard getcwd(&buffer, buffer.count) != nil else { return "." }
        return String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    // MARK: Writing

    /// What a dump wrote.
    struct Written: CustomStringConvertible {
        let json: String
        let html: String
        let reason: String
        let window: Duration?
        let threads: Int
        let events: Int

        var description: String {
            let span = window.map { "the last \(TKContentionCounters.format($0))" } ?? "the whole trace session"
            return "ThreadKit flight recorder: wrote \(json) and \(html) (\(span) before \(reason): \(threads) threads, "
                + "\(events) events, and the thread dump)"
        }
    }

    /// Writes the dump into `directory`; nil when another dump is being written. Throws
    /// `TKError(.systemCall)` naming the file and errno when a file cannot be created or written.
    static func write(to directory: String, reason: String) throws -> Written? {
        guard !dumping.exchange(true, ordering: .acquiring) else { return nil }
        defer { dumping.store(false, ordering: .releasing) }
        let now = tk_trace_now()
        var capture = TraceRecorder.capture()
        let window: Duration? = isOn ? FlightRecorder.window : nil
        if let window {
            let ns = UInt64(nanoseconds(window))
            capture = capture.clipped(from: now > ns ? now - ns : 0, openUntil: now)
        }
        let dump = TKDiagnostics.threadDump()
        let rows = TraceRows(capture)
        let summary = capture.summary()
        let pid = getpid()
        let files = try createFiles(in: directory, stem: "threadkit-flight-\(pid)-\(timeStamp())-")
        let span = window.map { "the last \(TKContentionCounters.format($0))" } ?? "the whole trace session"
        let note =
            "Flight recorder of process \(pid): \(span) before \(reason), \(summary.eventCount) events on \(rows.count) "
            + "threads. The thread dump is below."
        try files.write(files.json, call: "dumpFlight") { sink in
            var other = [("flightRecorder", reason), ("threadDump", dump)]
            if let window { other.insert(("window", TKContentionCounters.format(window)), at: 1) }
            TraceChromeJSON.write(rows, to: sink, otherData: other)
        }
        try files.write(files.html, call: "dumpFlight") { sink in
            TraceHTML.write(rows, title: "ThreadKit flight recorder: \(reason)", to: sink, note: note, dump: dump)
        }
        return Written(
            json: files.json.path, html: files.html.path, reason: reason, window: window, threads: rows.count,
            events: summary.eventCount)
    }

    /// A dump's two files, created and open for writing; closes their descriptors when dropped.
    private struct DumpFiles: ~Copyable {
        let json: (path: String, descriptor: Int32)
        let html: (path: String, descriptor: Int32)

        deinit {
            close(json.descriptor)
            close(html.descriptor)
        }

        /// Streams `body` into one of the two files.
        func write(_ file: (path: String, descriptor: Int32), call: String, _ body: (TraceSink) -> Void) throws {
            let error = TraceSink.write(to: file.descriptor, body)
            if error != 0 { throw cannotWrite(file.path, error, call: call) }
        }
    }

    /// Creates `stem<random>.json` and `stem<random>.html` in `directory` (PrivateDirectory: the
    /// directory checked to be this user's own or sticky, each file new, mode 0600, its name
    /// unguessable, nothing planted there followed or opened).
    private static func createFiles(in directory: String, stem: String) throws -> DumpFiles {
        let folder = directory.count > 1 && directory.hasSuffix("/") ? String(directory.dropLast()) : directory
        let opened: PrivateDirectory
        switch PrivateDirectory.open(folder) {
        case .success(let directory): opened = directory
        case .failure(let refusal): throw cannotUse(folder, refusal)
        }
        let prefix = folder == "/" ? "/" : folder + "/"
        for _ in 0..<64 {
            let json: (name: String, descriptor: Int32)
            switch opened.createUnique(prefix: stem, suffix: ".json") {
            case .success(let created): json = created
            case .failure(let refusal): throw cannotWrite(prefix + stem + "….json", refusal.errno)
            }
            let base = String(json.name.dropLast(".json".count))
            switch opened.createExclusive(base + ".html") {
            case .success(let html):
                return DumpFiles(json: (prefix + json.name, json.descriptor), html: (prefix + base + ".html", html))
            case .failure(let refusal):
                close(json.descriptor)
                opened.remove(json.name)
                if refusal.errno != EEXIST { throw cannotWrite(prefix + base + ".html", refusal.errno) }
            }
        }
        throw cannotWrite(prefix + stem + "….html", EEXIST)
    }

    private static func cannotWrite(_ path: String, _ error: Int32, call: String = "dumpFlight") -> TKError {
        TKError(
            .systemCall,
            "TKTrace.\(call): the flight recorder cannot write \"\(path)\": \(SystemCall.errnoName(error)). Fix: point "
                + "\(directoryVariable) (or the directory passed to dumpFlight(to:)) at an existing, writable directory "
                + "with room for the dump.", errno: error)
    }

    private static func cannotUse(_ directory: String, _ refusal: PrivateDirectory.Refusal) -> TKError {
        TKError(
            .systemCall,
            "TKTrace.dumpFlight: the flight recorder will not write into \"\(directory)\": \(refusal.reason). Fix: point "
                + "\(directoryVariable) (or the directory passed to dumpFlight(to:)) at an existing directory of this "
                + "user's (or a sticky one such as /tmp) that it may write to.", errno: refusal.errno)
    }

    /// Local time as yyyymmdd-hhmmss.
    private static func timeStamp() -> String {
        var now = time(nil)
        var parts = tm()
        localtime_r(&now, &parts)
        func two(_ v: Int32) -> String { v < 10 ? "0\(v)" : "\(v)" }
        return
            "\(parts.tm_year + 1900)\(two(parts.tm_mon + 1))\(two(parts.tm_mday))-\(two(parts.tm_hour))\(two(parts.tm_min))\(two(parts.tm_sec))"
    }
}
