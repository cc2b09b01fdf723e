// LinkedNodeList: the intrusive FIFO that waiter queues use (AsyncWaiters' suspended tasks,
// TKDispatchSemaphore's parked threads): nodes carry their own links, so queueing allocates
// nothing beyond the node and a node leaves from anywhere in O(1). Not thread-safe: guarded by its
// owner's lock, which also guards every node's links.

/// A node of a `LinkedNodeList`. `previous` should be `unowned(unsafe)`: the list holds each node
/// strongly through its predecessor's `next` (or `first`).
protocol LinkedNode: AnyObject {
    var next: Self? { get set }
    var previous: Self? { get set }
}

struct LinkedNodeList<Node: LinkedNode> {
    private(set) var first: Node?
    private unowned(unsafe) var last: Node?
    private(set) var count = 0

    var isEmpty: Bool { first == nil }

    mutating func append(_ node: Node) {
        node.previous = last
        if let last { last.next = node } else { first = node }
        last = node
        count += 1
    }

    /// Unlinks `node`, which must be in this list.
    mutating func remove(_ node: Node) {
        let next = node.next
        if let previous = node.previous { previous.next = next } else { first = next }
        if let next { next.previous = node.previous } else { last = node.previous }
        node.next = nil
        node.previous = nil
        count -= 1
    }
}
