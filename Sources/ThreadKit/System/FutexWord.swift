// FutexWord: a 32-bit atomic at a stable heap address, usable both with Swift's Atomic (which
// ThreadSanitizer understands) and as a futex address. Every ThreadKit blocking primitive keeps
// its state in one or more of these. It owns its word (~Copyable: one owner, no aliasing copy) and
// frees it in its deinit, which runs when its owner goes; the word itself may be touched from any
// thread while the owner is alive.
import Synchronization

// safety: the word is atomic; ~Copyable, so one value owns it and frees it once, in deinit,
// when its owner goes and no thread can use it any more.
@usableFromInline
struct FutexWord: ~Copyable, @unchecked Sendable {
    @usableFromInline let pointer: UnsafeMutablePointer<Atomic<UInt32>>

    init(_ initial: UInt32 = 0) {
        pointer = .allocate(capacity: 1)
        pointer.initialize(to: Atomic(initial))
    }

    /// A word alone on its cache line (and the adjacent-line prefetcher's pair): for words that
    /// different threads hammer side by side, which would otherwise share a line (false sharing).
    static func onItsOwnCacheLine(_ initial: UInt32 = 0) -> FutexWord {
        FutexWord(initial, at: UnsafeMutableRawPointer.allocate(byteCount: 128, alignment: 128))
    }

    private init(_ initial: UInt32, at memory: UnsafeMutableRawPointer) {
        pointer = memory.bindMemory(to: Atomic<UInt32>.self, capacity: 1)
        pointer.initialize(to: Atomic(initial))
    }

    /// Runs when the owner goes, when no thread can be using the word.
    deinit {
        pointer.deinitialize(count: 1)
        pointer.deallocate()
    }

    /// The same four bytes as a plain pointer, for the kernel's futex calls only.
    var address: UnsafeMutablePointer<UInt32> {
        UnsafeMutableRawPointer(pointer).assumingMemoryBound(to: UInt32.self)
    }
}
