// HeadArray: a FIFO on an array with a moving head, for queues that are appended at the back,
// taken from the front one at a time, and sometimes handed over whole (a port's inbox, an async
// sequence's buffer). A value type: its owner's lock guards it.

struct HeadArray<Element> {
    /// The elements are `storage[head...]`.
    private var storage: [Element] = []
    private var head = 0

    var count: Int { storage.count - head }
    var isEmpty: Bool { head == storage.count }

    mutating func append(_ element: Element) { storage.append(element) }

    /// Takes the oldest element. The taken prefix is dropped when the queue empties, or once it is
    /// at least 256 long and half the array (amortised O(1)).
    mutating func popFirst() -> Element? {
        guard head < storage.count else { return nil }
        let element = storage[head]
        head += 1
        if head == storage.count {
            storage.removeAll(keepingCapacity: true)
            head = 0
        } else if head >= 256 && head * 2 >= storage.count {
            storage.removeFirst(head)
            head = 0
        }
        return element
    }

    mutating func removeAll(keepingCapacity: Bool = false) {
        storage.removeAll(keepingCapacity: keepingCapacity)
        head = 0
    }

    /// Moves every element into `batch` (which must be empty), in order: one swap.
    mutating func takeAll(into batch: inout [Element]) {
        if head > 0 {
            storage.removeFirst(head)
            head = 0
        }
        swap(&storage, &batch)
    }
}
