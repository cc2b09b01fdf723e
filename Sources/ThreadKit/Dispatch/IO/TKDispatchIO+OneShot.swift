// TKDispatchIO+OneShot: dispatch_read and dispatch_write: one read or write on a descriptor
// without a channel of the caller's, through a stream channel made for it and closed after it.
// The handler runs once, on the given queue.

extension TKDispatchIO {
    /// Reads up to `maxLength` bytes from `fileDescriptor` (`Int.max`: to the end of file) at its
    /// position, then calls `handler` on `queue` once with all of them and 0, or what was read
    /// and the errno that stopped it (dispatch_read).
    public static func read(
        fromFileDescriptor fileDescriptor: Int32, maxLength: Int, runningHandlerOn queue: TKDispatchQueue,
        handler: @escaping @Sendable (_ data: TKDispatchData, _ error: Int32) -> Void
    ) {
        let io = TKDispatchIO(type: .stream, fileDescriptor: fileDescriptor, queue: queue) { _ in }
        io.setLimit(lowWater: Int.max)
        let collected = OneShotBuffer()
        io.read(offset: 0, length: maxLength, queue: io.channel) { done, data, error in
            if let data { collected.data.append(data) }
            guard done else { return }
            let result = collected.data
            queue.async { handler(result, error) }
            io.close()
        }
    }

    /// Writes all of `data` to `fileDescriptor` at its position, then calls `handler` on `queue`
    /// once with nil and 0, or the bytes not written and the errno that stopped it (dispatch_write).
    public static func write(
        toFileDescriptor fileDescriptor: Int32, data: TKDispatchData, runningHandlerOn queue: TKDispatchQueue,
        handler: @escaping @Sendable (_ data: TKDispatchData?, _ error: Int32) -> Void
    ) {
        let io = TKDispatchIO(type: .stream, fileDescriptor: fileDescriptor, queue: queue) { _ in }
        io.write(offset: 0, data: data, queue: io.channel) { done, remaining, error in
            guard done else { return }
            queue.async { handler(remaining, error) }
            io.close()
        }
    }
}

// safety: touched only on the channel's serial queue, where its handler runs.
/// What a one-shot read has collected. Touched only on the channel's queue, where its handler
/// runs.
private final class OneShotBuffer: @unchecked Sendable {
    var data = TKDispatchData()
}
