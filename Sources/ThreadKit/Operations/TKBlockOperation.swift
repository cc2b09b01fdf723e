// TKBlockOperation: NSBlockOperation (SPEC §7). Thread-safe. `moreBlocks` and `frozen` are guarded
// by the operation's lock; `firstBlock` is immutable. Once `main()` has taken the blocks (`frozen`),
// adding one is a misuse: it could never run.

// safety: `moreBlocks` and `frozen` are touched only under the operation's lock.
/// An operation that runs one or more blocks; with several, they run concurrently on the global
/// pool (the first on the operation's own thread), and the operation finishes when all are done.
public final class TKBlockOperation: TKOperation, @unchecked Sendable {
    private let firstBlock: @Sendable () -> Void
    private var moreBlocks: [@Sendable () -> Void] = [] // guarded by lock
    private var frozen = false // guarded by lock

    /// Creates an operation that runs `block`, like `BlockOperation(block:)`; add more blocks
    /// with ``addExecutionBlock(_:)`` before it starts.
    public init(block: @escaping @Sendable () -> Void) {
        firstBlock = block
        super.init()
    }

    /// Adds a block to run concurrently with the others. Before the operation starts only.
    public func addExecutionBlock(_ block: @escaping @Sendable () -> Void) {
        let refused = lock.withLock { () -> Bool in
            if frozen { return true }
            moreBlocks.append(block)
            return false
        }
        if refused {
            misuse(
                "\(described).addExecutionBlock(_:) called after the operation started: the block could never run. "
                    + "Fix: add every execution block before adding the operation to a queue or starting it.")
        }
    }

    public override func main() {
        let more = lock.withLock { () -> [@Sendable () -> Void] in
            frozen = true
            return moreBlocks
        }
        if more.isEmpty { return firstBlock() }
        // The others on the pool, this one here; the group wait parks through Parking, so the pool
        // replaces this worker while it waits.
        let group = TKDispatchGroup()
        let pool = TKDispatchQueue.global(qos: qualityOfService)
        for block in more { pool.async(group: group, execute: block) }
        firstBlock()
        group.wait()
    }
}
