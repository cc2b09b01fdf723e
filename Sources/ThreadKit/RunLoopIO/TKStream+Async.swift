// TKStream+Async: streams in async/await (docs/RunLoopIO.md, "Streams"; docs/Concurrency.md §4).
// `TKInputStream.chunks(maxLength:)` is an AsyncSequence of the byte chunks the stream gives, and
// `TKOutputStream.write(_:)` an async write of a whole buffer. Both drive a scheduled stream the
// way a delegate would, with a delegate of their own (`StreamEventRelay`):
//   1. the call installs the relay as the stream's delegate (or finds it there), opens the stream if
//      it is not open, and marks the relay busy (one async call per stream at a time);
//   2. it notes the relay's event count, then asks the stream itself: its status (end, error,
//      closed), and whether one read or write would not wait (`hasBytesAvailable`,
//      `hasSpaceAvailable`: the side's own poll, so readiness that came while nobody listened,
//      or before the relay was the delegate, is seen too);
//   3. ready: it reads one chunk (or writes what fits) on the calling thread and goes on;
//   4. not ready: it suspends on the relay until an event arrives after the count noted in step 2
//      (an event between steps 2 and 4 resumes it at once: no lost wake-up), then goes back to 2.
// Every readiness a step-3 transfer needs is armed: the stream's events are one-shot, armed by
// `open()` and each read or write; an arm is used up only by an event delivery, which leaves the
// stream ready until the next transfer (only the awaiting task transfers: the relay never reads or
// writes), so step 2 sees it.
//
// The relay is resumed by the stream's events, delivered on the thread of the loop the stream is
// scheduled on; a task that prefers that loop as its task executor is then enqueued straight back
// on the same loop (TKRunLoop+TaskExecutor.swift): the read, the handler and the next read all run
// on the loop's thread, with no hop. Back-pressure: the sequence reads only inside `next()`, and a
// write returns only once the stream has taken every byte.
//
// Cancellation (AsyncWaiters' rules): a cancelled task stops waiting at once, throws
// CancellationError and leaves no waiter on the relay. The stream is left as it is: open,
// scheduled, nothing read from it after the cancellation (a write may have written a prefix of its
// bytes). Closing it is its owner's call; once closed, the stream holds no descriptor.
//
// Threads: the async calls from any task, one at a time per stream (`busy`); the relay's events on
// the loop thread. The relay's event count is guarded by its waiter list's mutex (a leaf lock: no
// stream or loop lock is taken under it, and no continuation is resumed while it is held).
import Synchronization

/// The delegate through which a stream's async calls wait for its events: it counts them and
/// resumes the waiting task. Held by the iteration or the write in progress; the stream holds it
/// weakly, as any delegate.
// safety: @unchecked Sendable (a delegate must be Sendable): `events` is read and written only with
// the mutex of `waiters` held (`wake`, `eventCount`, the `admit` hook of `waitForEvent`); the other
// fields are Sendable themselves.
final class StreamEventRelay: TKStreamDelegate, @unchecked Sendable {
    /// The task waiting for the stream's next event (one at most: `busy`).
    let waiters = AsyncWaiters<Void>()
    /// Events delivered so far, and `close()` calls seen. Guarded by `waiters`' mutex.
    private var events: UInt64 = 0
    /// An async call is in progress on the stream. Acquiring when taken, releasing when given back,
    /// so the next call sees what the previous one did to the stream.
    let busy = Atomic<Bool>(false)

    init() {}

    /// Any event may change what the waiting task finds: count it and resume the task.
    func stream(_ aStream: TKStream, handle eventCode: TKStream.Event) { wake() }

    /// Counts an event and resumes the waiting task, if any (on the calling thread: the loop's,
    /// for events; the closing thread, for `close()`).
    func wake() {
        let waiter = waiters.withLock { () -> AsyncWaiters<Void>.Continuation? in
            events &+= 1
            return waiters.popFirstLocked()
        }
        waiter?.resume(returning: ())
    }

    /// The number of events so far, for `waitForEvent(after:)`.
    var eventCount: UInt64 { waiters.withLock { events } }

    /// Returns once an event after the `seen`-th has arrived (at once if one already has); throws
    /// CancellationError, with no waiter left behind, if the task is or gets cancelled first.
    func waitForEvent(after seen: UInt64) async throws {
        try await waiters.suspend(admit: { events != seen ? () : nil })
    }
}

extension TKStream {
    /// Step 1 of an async call (`call` names it in errors): the stream's relay, installed as its
    /// delegate if it has none, marked busy; the stream opened if it was not. Throws when the
    /// stream has a delegate of its own, or another async call is in progress on it.
    func beginAsyncCall(_ call: String) throws -> StreamEventRelay {
        let relay = try core.withLock { c -> StreamEventRelay in
            if let relay = c.delegate as? StreamEventRelay { return relay }
            if let other = c.delegate {
                throw TKError(
                    .invalidArgument,
                    "\(call): the stream has a delegate of its own (\(type(of: other))); the async calls receive the "
                        + "stream's events through a delegate of theirs, and the two would take each other's events. "
                        + "Fix: set the stream's delegate to nil before awaiting it, or drive it through the delegate alone.")
            }
            let relay = StreamEventRelay()
            c.delegate = relay
            return relay
        }
        guard !relay.busy.exchange(true, ordering: .acquiring) else {
            throw TKError(
                .invalidArgument,
                "\(call): another task is already \(self is TKInputStream ? "reading" : "writing") this stream; their "
                    + "bytes would interleave. Fix: use a stream from one task at a time (await each call before the "
                    + "next, or funnel the stream's work through one task).")
        }
        if streamStatus == .notOpen { open() }
        return relay
    }

    /// The end of an async call: the next one may begin.
    func endAsyncCall(_ relay: StreamEventRelay) {
        relay.busy.store(false, ordering: .releasing)
    }

    /// Step 4: waits for the stream's next event, or throws if no event can ever come (the stream
    /// is in no run loop) or the task is cancelled.
    func awaitEvent(_ relay: StreamEventRelay, after seen: UInt64, _ call: String) async throws {
        guard presence.isScheduled else {
            throw TKError(
                .invalidArgument,
                "\(call): the stream is not scheduled on a run loop, so no event would ever resume the waiting task. "
                    + "Fix: schedule(in:forMode:) the stream on the loop that should serve it (for no thread hop, the "
                    + "loop the task prefers: withTaskExecutorPreference(loop)) before awaiting it.")
        }
        try await relay.waitForEvent(after: seen)
    }

    /// The error for a stream found closed or failed by `call`.
    func asyncFailure(_ call: String) -> TKError {
        if streamStatus == .error, let error = streamError { return error }
        return TKError(
            .invalidArgument,
            "\(call): the stream is closed (close() was called), so it can transfer nothing more. Fix: stop using a "
                + "stream once it is closed; a task closing it ends the other tasks' calls on it with this error.")
    }
}

extension TKInputStream {
    /// The stream's bytes as an asynchronous sequence of chunks: each element is what one
    /// `read(_:maxLength:)` gave, 1 to `maxLength` bytes, in order; the sequence ends at the
    /// stream's end and throws its `streamError` if it fails (a peer's reset, say).
    ///
    /// The stream is read from the loop it is scheduled on: schedule it first (opening is
    /// optional: the first `next()` opens a stream that is not open). A `next()` with nothing to
    /// read suspends the task until the stream's next event on that loop's thread resumes it;
    /// a task that prefers that loop (`withTaskExecutorPreference(loop)`) then continues on the
    /// loop's thread with no hop, so the reads and the code handling the chunks all run there.
    /// Bytes are read only when `next()` is called, so a slow consumer holds the peer back
    /// (back-pressure), as a delegate that stops reading does.
    ///
    /// The iteration uses the stream's delegate: a stream with a delegate of its own throws
    /// TKError `.invalidArgument`, and one task at a time may iterate a stream (a second
    /// concurrent `next()` throws too). A stream that is not scheduled and has nothing to read
    /// throws rather than wait forever.
    ///
    /// Cancellation: once the task is cancelled, `next()` reads nothing more and throws
    /// `CancellationError` (at once, also while waiting), leaving no waiter behind, and the
    /// sequence is over. The stream itself is left open and scheduled, with no byte lost: close
    /// it (or iterate it again) as its owner decides; a closed stream holds no descriptor. A
    /// stream closed by another task while this one iterates ends the sequence with an error.
    /// - Parameter maxLength: The most bytes one element holds (at least 1; default 64 KiB).
    public func chunks(maxLength: Int = 65_536) -> Chunks {
        Chunks(stream: self, maxLength: maxLength)
    }

    /// The chunks of bytes an input stream gives, as an AsyncSequence: made by
    /// ``TKInputStream/chunks(maxLength:)``, which says how it reads, waits and ends.
    public struct Chunks: AsyncSequence, Sendable {
        /// A chunk: the bytes one read gave, in order (never empty).
        public typealias Element = [UInt8]
        /// What the iteration throws: the stream's `streamError`, a TKError for misuse of the
        /// stream (see ``TKInputStream/chunks(maxLength:)``), or CancellationError.
        public typealias Failure = any Error

        let stream: TKInputStream
        let maxLength: Int

        /// A new iteration of the stream. Iterations share the stream: each byte goes to one of
        /// them, and only one may be in `next()` at a time.
        public func makeAsyncIterator() -> AsyncIterator {
            AsyncIterator(reader: ChunkReader(stream: stream, maxLength: maxLength))
        }

        /// Reads the chunks one `next()` at a time.
        public struct AsyncIterator: AsyncIteratorProtocol {
            let reader: ChunkReader

            /// The next chunk; nil at the stream's end (and after the iteration threw). Throws
            /// the stream's error, a TKError for misuse, or CancellationError.
            public mutating func next() async throws -> [UInt8]? {
                try await reader.next()
            }
        }
    }
}

/// One iteration of `chunks(maxLength:)`: its scratch buffer, the relay it keeps alive (so the
/// stream's delegate stays while it iterates), and whether it is over. Not Sendable: it belongs to
/// one iterator, used by one task.
final class ChunkReader {
    static let call = "TKInputStream.chunks(maxLength:)"
    let stream: TKInputStream
    let maxLength: Int
    // safety: owned by this reader (allocated lazily by `next()`, freed in deinit); `next()` is
    // its only user (the reader is not Sendable: one task), and copies out what it read.
    private var scratch: UnsafeMutablePointer<UInt8>?
    /// Set once `next()` has returned nil or thrown: later calls return nil.
    private var over = false
    /// The stream's relay while the iteration lasts (dropped when it is over).
    private var relay: StreamEventRelay?

    init(stream: TKInputStream, maxLength: Int) {
        self.stream = stream
        self.maxLength = maxLength
    }

    deinit { scratch?.deallocate() }

    func next() async throws -> [UInt8]? {
        if over { return nil }
        do {
            let chunk = try await read()
            if chunk == nil { finish() }
            return chunk
        } catch {
            finish()
            throw error
        }
    }

    private func finish() {
        over = true
        relay = nil
    }

    private func read() async throws -> [UInt8]? {
        try Task.checkCancellation()
        guard maxLength > 0 else {
            throw TKError(
                .invalidArgument,
                "\(ChunkReader.call): maxLength \(maxLength) cannot hold a byte. Fix: pass a maxLength of at least 1.")
        }
        let relay = try stream.beginAsyncCall(ChunkReader.call)
        defer { stream.endAsyncCall(relay) }
        self.relay = relay
        while true {
            let seen = relay.eventCount
            switch stream.streamStatus {
            case .atEnd:
                return nil
            case .closed, .error:
                throw stream.asyncFailure(ChunkReader.call)
            case .open, .reading, .writing:
                guard stream.hasBytesAvailable else { break }
                let buffer = scratch ?? UnsafeMutablePointer<UInt8>.allocate(capacity: maxLength)
                scratch = buffer
                let n = stream.read(buffer, maxLength: maxLength)
                if n > 0 { return Array(UnsafeBufferPointer(start: buffer, count: n)) }
                if n == 0 { return nil }
                throw stream.asyncFailure(ChunkReader.call)
            case .notOpen, .opening:
                break
            }
            try await stream.awaitEvent(relay, after: seen, ChunkReader.call)
        }
    }
}

extension TKOutputStream {
    /// Writes every byte of `bytes`, suspending the task while the stream has no room, and
    /// returns once the stream has taken them all (a socket: the kernel has them; the peer may
    /// not have read them yet).
    ///
    /// The stream is written from the loop it is scheduled on: schedule it first (opening is
    /// optional: a stream that is not open is opened, and the write waits for the connection).
    /// Each wait ends with the stream's next event on that loop's thread; a task that prefers
    /// that loop (`withTaskExecutorPreference(loop)`) continues on the loop's thread with no hop.
    /// A peer that stops reading holds the writer back (back-pressure) at no CPU cost.
    ///
    /// Throws the stream's `streamError` if it fails (the peer reset the connection, say), and
    /// TKError `.invalidArgument` if it is closed, has a delegate of its own, is written by
    /// another task's `write(_:)` at the same time, or must wait while scheduled on no run loop.
    ///
    /// Cancellation: a task cancelled before the call writes nothing and throws
    /// `CancellationError`; one cancelled while it waits for room stops waiting at once and
    /// throws `CancellationError`, leaving no waiter behind, with the bytes written before the
    /// wait (a prefix of `bytes`) written. The stream is left open and scheduled: close it (a
    /// closed stream holds no descriptor) or go on writing, as its owner decides.
    /// - Parameter bytes: The bytes to write, in order.
    public func write(_ bytes: [UInt8]) async throws {
        let call = "TKOutputStream.write(_:)"
        try Task.checkCancellation()
        let relay = try beginAsyncCall(call)
        defer { endAsyncCall(relay) }
        var offset = 0
        while true {
            let seen = relay.eventCount
            switch streamStatus {
            case .closed, .error, .atEnd:
                throw asyncFailure(call)
            case .open, .reading, .writing:
                if offset == bytes.count { return }
                guard hasSpaceAvailable else { break }
                let n = bytes.withUnsafeBufferPointer { write($0.baseAddress! + offset, maxLength: $0.count - offset) }
                if n > 0 {
                    offset += n
                    continue
                }
                if n < 0 { throw asyncFailure(call) }
            case .notOpen, .opening:
                break
            }
            try await awaitEvent(relay, after: seen, call)
        }
    }
}
