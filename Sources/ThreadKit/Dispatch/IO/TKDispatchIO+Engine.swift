// TKDispatchIO+Engine: the channel's work, all on its private serial queue `channel`: open the
// descriptor, run barriers at the head of the FIFO, advance the first read and the first write
// before the next barrier (each in chunks, waiting for readiness through a source when a pipe or
// socket says EAGAIN), deliver partial results by the water marks and the interval, and clean up
// once closed and drained (docs/DispatchIO.md, "How a channel runs").
import CThreadKit
import Glibc

// safety: the mutable fields are touched only on the channel's serial queue.
/// One read, write or barrier of a channel. Fields: channel queue only.
final class IOOperation: @unchecked Sendable {
    enum Kind {
        case read(length: Int)
        case write
        case barrier(@Sendable () -> Void)
    }

    let kind: Kind
    /// Random access: where the next byte goes or comes from (relative to the base position).
    var offset: off_t
    let queue: TKDispatchQueue
    let handler: TKDispatchIO.IOHandler?
    /// Reads: bytes read and not yet delivered. Writes: bytes not yet written.
    var data = TKDispatchData()
    /// Reads: bytes read so far.
    var transferred = 0

    init(_ kind: Kind, offset: off_t, queue: TKDispatchQueue, handler: TKDispatchIO.IOHandler?) {
        self.kind = kind
        self.offset = offset
        self.queue = queue
        self.handler = handler
    }

    var isRead: Bool { if case .read = kind { true } else { false } }
    var isWrite: Bool { if case .write = kind { true } else { false } }
    var isBarrier: Bool { if case .barrier = kind { true } else { false } }
}

extension TKDispatchIO {
    /// One turn of the channel: the phases in order.
    func pump() {
        // 1. Open (once); a descriptor that cannot be used fails every operation.
        if !opened { openDescriptor() }
        if openError != 0 {
            let failed = operations
            operations = []
            for operation in failed { finish(operation, error: openError, remove: false) }
        }
        // 2. Barriers at the head run now, in order.
        while let head = operations.first, case .barrier(let block) = head.kind {
            operations.removeFirst()
            block()
        }
        // 3. The first read and the first write before the next barrier advance.
        if !readWaiting, let read = firstBeforeBarrier(\.isRead) { advanceRead(read) }
        if !writeWaiting, let write = firstBeforeBarrier(\.isWrite) { advanceWrite(write) }
        // 4. Closed and drained: clean up.
        if closed && operations.isEmpty && !cleanedUp { cleanUp() }
        keepAlive = operations.isEmpty ? nil : self
    }

    /// The first operation matching `kind` ahead of the first barrier.
    func firstBeforeBarrier(_ kind: (IOOperation) -> Bool) -> IOOperation? {
        for operation in operations {
            if operation.isBarrier { return nil }
            if kind(operation) { return operation }
        }
        return nil
    }

    private func openDescriptor() {
        opened = true
        switch origin {
        case .descriptor(let given): fd = given
        case .path(let path, let oflag, let mode):
            fd = open(path, oflag | O_CLOEXEC, mode)
            if fd < 0 {
                openError = errno
                return
            }
        }
        var size: Int64 = 0
        var links: UInt64 = 0
        guard tk_fd_size_links(fd, &size, &links) == 0 else {
            openError = errno
            return
        }
        var st = stat()
        _ = fstat(fd, &st)
        isRegular = st.st_mode & S_IFMT == S_IFREG
        isSocket = st.st_mode & S_IFMT == S_IFSOCK
        if type == .random {
            basePosition = lseek(fd, 0, SEEK_CUR)
            if basePosition < 0 { basePosition = 0 }
        }
        if !isRegular {
            // Pipes, sockets, terminals: non-blocking, waiting through sources (libdispatch does
            // the same and restores the flags at cleanup).
            let flags = fcntl(fd, F_GETFL)
            if flags >= 0 && flags & O_NONBLOCK == 0 {
                originalFlags = flags
                _ = fcntl(fd, F_SETFL, flags | O_NONBLOCK)
            }
        }
        descriptor.store(fd, ordering: .relaxed)
    }

    // MARK: Reading

    private func advanceRead(_ operation: IOOperation) {
        guard case .read(let length) = operation.kind else { return }
        for _ in 0..<TKDispatchIO.chunksPerTurn {
            let wanted = min(length - operation.transferred, TKDispatchIO.chunkSize)
            if wanted <= 0 { return finish(operation, error: 0) }
            var at: off_t = 0 // random access: where in the file
            if type == .random {
                guard let position = filePosition(of: operation) else { return finish(operation, error: EINVAL) }
                at = position
            }
            let memory = malloc(wanted)!
            let n: Int =
                switch type {
                case .stream: Glibc.read(fd, memory, wanted)
                case .random: pread(fd, memory, wanted, at)
                }
            if n > 0 {
                let bytes = realloc(memory, n) ?? memory
                operation.data.append(TKDispatchData(bytesNoCopy: UnsafeRawBufferPointer(start: bytes, count: n), deallocator: .free))
                operation.transferred += n
                advanceOffset(of: operation, by: n)
                deliverPartial(operation, atInterval: false)
                continue
            }
            let error = n == 0 ? 0 : errno
            free(memory)
            if n < 0 && error == EINTR { continue }
            if n < 0 && (error == EAGAIN || error == EWOULDBLOCK) && !isRegular { return waitUntilReady(write: false) }
            return finish(operation, error: error) // end of file (0) or a failure
        }
        channel.async { [self] in pump() } // more to do: yield, then go on
    }

    /// Waits for the descriptor to become readable (or writable) through a source on the
    /// manager's epoll set: made on first need, suspended by its handler, resumed for each wait.
    private func waitUntilReady(write: Bool) {
        if write { writeWaiting = true } else { readWaiting = true }
        if let existing = write ? writeSource : readSource { return existing.resume() }
        let source =
            write
            ? TKDispatchSource.makeWriteSource(fileDescriptor: fd, queue: channel)
            : TKDispatchSource.makeReadSource(fileDescriptor: fd, queue: channel)
        source.setEventHandler { [weak self, unowned source] in
            source.suspend()
            guard let self else { return }
            if write { writeWaiting = false } else { readWaiting = false }
            pump()
        }
        if write { writeSource = source } else { readSource = source }
        source.activate()
    }

    // MARK: Writing

    private func advanceWrite(_ operation: IOOperation) {
        for _ in 0..<TKDispatchIO.chunksPerTurn {
            guard operation.data.count > 0 else { return finish(operation, error: 0) }
            var at: off_t = 0 // random access: where in the file
            if type == .random {
                guard let position = filePosition(of: operation) else { return finish(operation, error: EINVAL) }
                at = position
            }
            let region = operation.data.region(location: 0).data
            let n = region.withUnsafeBytes { bytes -> Int in
                let count = min(bytes.count, TKDispatchIO.chunkSize)
                switch type {
                case .random: return pwrite(fd, bytes.baseAddress, count, at)
                case .stream:
                    // A socket whose peer left must not raise SIGPIPE in the process.
                    if isSocket { return send(fd, bytes.baseAddress, count, Int32(MSG_NOSIGNAL)) }
                    return Glibc.write(fd, bytes.baseAddress, count)
                }
            }
            if n > 0 {
                operation.data = operation.data.subdata(in: n..<operation.data.count)
                advanceOffset(of: operation, by: n)
                continue
            }
            let error = errno
            if n < 0 && error == EINTR { continue }
            if n < 0 && (error == EAGAIN || error == EWOULDBLOCK) && !isRegular { return waitUntilReady(write: true) }
            return finish(operation, error: n == 0 ? EIO : error)
        }
        channel.async { [self] in pump() }
    }

    // MARK: Offsets

    /// Random access: where `operation`'s next byte is in the file, the base position plus its
    /// offset; nil when that sum is past `off_t`'s range (an offset near Int64.max on a descriptor
    /// not at 0). libdispatch's sum wraps negative there and the kernel refuses it with EINVAL: the
    /// operation ends with EINVAL too, having transferred nothing more (a write hands back the
    /// bytes not written).
    private func filePosition(of operation: IOOperation) -> off_t? {
        let (sum, overflow) = basePosition.addingReportingOverflow(operation.offset)
        return overflow ? nil : sum
    }

    /// Moves a random-access operation's offset past `n` bytes just transferred. A stream's
    /// offset is the caller's value, ignored (it may be anything, Int64.max included) and left
    /// alone. The kernel never transfers past off_t's range (`pos + count` must fit, or it answers
    /// EINVAL), so the sum fits; it saturates all the same, and `filePosition` then refuses it.
    private func advanceOffset(of operation: IOOperation, by n: Int) {
        guard type == .random else { return }
        let (sum, overflow) = operation.offset.addingReportingOverflow(off_t(n))
        operation.offset = overflow ? .max : sum
    }

    // MARK: Delivering

    /// Hands a reader what the marks allow: pieces of `highWater` bytes whenever that many are
    /// waiting, the rest once `lowWater` is reached (unless strict) or at an interval tick.
    private func deliverPartial(_ operation: IOOperation, atInterval: Bool) {
        while operation.data.count >= highWater {
            deliver(operation, done: false, data: operation.data.subdata(in: 0..<highWater), error: 0)
            operation.data = operation.data.subdata(in: highWater..<operation.data.count)
        }
        let lowWaterReached = !strictInterval && operation.data.count >= lowWater
        if operation.data.count > 0 && (lowWaterReached || atInterval) {
            deliver(operation, done: false, data: operation.data, error: 0)
            operation.data = TKDispatchData()
        }
        scheduleTick()
    }

    /// Ends `operation` (removing it from the FIFO unless `remove` is false): a read hands over
    /// what is left (in high-water pieces, the last one with done), a write what was not written.
    func finish(_ operation: IOOperation, error: Int32, remove: Bool = true) {
        if remove { operations.removeAll { $0 === operation } }
        switch operation.kind {
        case .read:
            var rest = operation.data
            while rest.count > highWater {
                deliver(operation, done: false, data: rest.subdata(in: 0..<highWater), error: 0)
                rest = rest.subdata(in: highWater..<rest.count)
            }
            deliver(operation, done: true, data: rest, error: error)
        case .write:
            deliver(operation, done: true, data: operation.data.count > 0 ? operation.data : nil, error: error)
        case .barrier(let block):
            block() // a barrier of a stopped channel still runs (it may be the caller's only signal)
        }
        operation.data = TKDispatchData()
        // What waits behind it may start now.
        if remove { channel.async { [self] in pump() } }
    }

    private func deliver(_ operation: IOOperation, done: Bool, data: TKDispatchData?, error: Int32) {
        guard let handler = operation.handler else { return }
        deliveries.enter()
        let deliveries = deliveries
        operation.queue.async {
            handler(done, data, error)
            deliveries.leave()
        }
    }

    // MARK: Interval

    func scheduleTick() {
        guard let interval, !tickScheduled, operations.contains(where: { !$0.isBarrier }) else { return }
        tickScheduled = true
        channel.asyncAfter(deadline: .now + interval) { [weak self] in
            guard let self else { return }
            tickScheduled = false
            if let read = firstBeforeBarrier(\.isRead) { deliverPartial(read, atInterval: true) }
            if let write = firstBeforeBarrier(\.isWrite) {
                deliver(write, done: false, data: write.data, error: 0)
            }
            scheduleTick()
        }
    }

    // MARK: Cleanup

    private func cleanUp() {
        cleanedUp = true
        let error = openError
        releaseDescriptor()
        submitCleanupHandler(error)
    }

    /// Runs the cleanup handler (once) on the channel's queue after every handler call already
    /// submitted has returned (docs/DispatchIO.md). Channel queue, or deinit.
    private func submitCleanupHandler(_ error: Int32) {
        guard let handler = cleanupHandler else { return }
        cleanupHandler = nil
        deliveries.notify(queue: queue) { handler(error) }
    }

    /// Stops the sources, restores the descriptor's flags and closes a descriptor the channel
    /// opened. Channel queue, or deinit.
    func releaseDescriptor() {
        // A source not waiting sits suspended (its handler suspended it): resume it once cancelled,
        // so it ends (a suspended source keeps its handlers).
        if let readSource {
            readSource.cancel()
            if !readWaiting { readSource.resume() }
        }
        if let writeSource {
            writeSource.cancel()
            if !writeWaiting { writeSource.resume() }
        }
        readSource = nil
        writeSource = nil
        if fd >= 0 {
            if let originalFlags { _ = fcntl(fd, F_SETFL, originalFlags) }
            if case .path = origin { Glibc.close(fd) }
        }
        fd = -1
        descriptor.store(-1, ordering: .relaxed)
        if !cleanedUp { submitCleanupHandler(openError) }
    }
}
