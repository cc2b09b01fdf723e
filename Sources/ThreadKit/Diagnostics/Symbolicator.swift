// Symbolicator: the one way reports turn return addresses into frames (docs/Diagnostics.md §7).
// Every report kind (blocking, lock order, hangs, thread dumps, contention, TKThread's call stack)
// hands it the addresses a CallStack captured; it answers, per address, the frames there —
// innermost first, inlined frames included — with the demangled function, the image, the offset
// and file:line where debug information exists.
//
// How: the toolchain's Runtime module (SE-0419) reads each image's `.symtab` and DWARF, as Swift's
// own crash backtracer does, so a release build names its internal and private functions (the
// dynamic symbol table that `backtrace_symbols` reads has none of them). Where it finds nothing
// (a stripped binary, an image it cannot read), `dladdr` is asked (exported symbols only), and
// past that the frame is `image +0xoffset`.
//
// Bounds: answers are cached per address, at most `cacheLimit` addresses (past it the cache is
// emptied and filled again). One call symbolicates new addresses for at most `budget` (checked
// between batches of `batch` addresses); the frames left when the budget is spent get the
// `dladdr` answer, uncached, so a later report tries them again. The Runtime keeps the images it
// opened mapped (file-backed memory) for later calls.
//
// Threads: any thread. `state` is a Synchronization.Mutex (no `Parking` under it); symbolication
// runs with it released, so two reports may symbolicate the same new address at once (both store
// the same answer). Callers are report paths: never a hook's fast path.
import CThreadKit
@_spi(Internal) import Runtime
import Synchronization

enum Symbolicator {
    /// Addresses kept in the cache at most.
    static let cacheLimit = 8_192
    /// Time one call may spend symbolicating new addresses.
    static let budget: Duration = .milliseconds(750)
    /// New addresses symbolicated in one Runtime call.
    static let batch = 16

    private struct State {
        var frames: [UInt: [SymbolicatedFrame]] = [:]
        var images: ImageMap?
        /// Calls that ran out of budget (reports whose last frames were named by dladdr only).
        var overBudget = 0
    }
    private static let state = Mutex(State())

    /// The frames at each address, in order (one entry per address; inlined frames make an entry
    /// longer than one).
    static func frames(at addresses: [UInt]) -> [[SymbolicatedFrame]] {
        var answers = [[SymbolicatedFrame]?](repeating: nil, count: addresses.count)
        var images: ImageMap? = nil
        state.withLock { state in
            for (i, address) in addresses.enumerated() { answers[i] = state.frames[address] }
            images = state.images
        }
        let missing = Array(Set(addresses.indices.filter { answers[$0] == nil }.map { addresses[$0] }))
        if !missing.isEmpty {
            if images == nil || missing.contains(where: { !covers(images!, $0) }) {
                images = ImageMap.capture()
                state.withLock { $0.images = images }
            }
            let found = symbolicate(missing, images: images!)
            for (i, address) in addresses.enumerated() where answers[i] == nil { answers[i] = found[address] }
        }
        return answers.enumerated().map { $0.element ?? [fallback(addresses[$0.offset])] }
    }

    /// How many calls ran out of their time budget since the process started.
    static var callsOverBudget: Int { state.withLock { $0.overBudget } }

    /// Whether some image of `images` holds `address` (else an image was loaded after the map).
    private static func covers(_ images: ImageMap, _ address: UInt) -> Bool {
        images.contains { image in
            guard let base = UInt(exactly: UInt64(image.baseAddress) ?? 0), let end = UInt(exactly: UInt64(image.endOfText) ?? 0)
            else { return false }
            return address >= base && address < end
        }
    }

    /// Symbolicates `addresses` in batches until the budget is spent; caches what it found.
    private static func symbolicate(_ addresses: [UInt], images: ImageMap) -> [UInt: [SymbolicatedFrame]] {
        let deadline = ContinuousClock.now + budget
        var found: [UInt: [SymbolicatedFrame]] = [:]
        var start = 0
        while start < addresses.count {
            if ContinuousClock.now >= deadline {
                state.withLock { $0.overBudget += 1 }
                break
            }
            let part = Array(addresses[start..<min(start + batch, addresses.count)])
            start += part.count
            let backtrace = Backtrace(
                architecture: "x86_64", frames: part.map { RichFrame<UInt>.returnAddress($0) }, images: images)
            guard let symbolicated = backtrace.symbolicated(with: images, options: [.showInlineFrames, .showSourceLocations])
            else { continue }
            for frame in symbolicated.frames {
                guard case .returnAddress(let captured) = frame.captured, let raw = UInt64(captured), let address = UInt(exactly: raw)
                else { continue }
                found[address, default: []].append(SymbolicatedFrame(address: address, frame, images: symbolicated.images))
            }
        }
        // An address the Runtime named nothing for gets dladdr's answer (exported symbols).
        for (address, frames) in found where frames.allSatisfy({ $0.function.isEmpty }) {
            found[address] = [fallback(address)]
        }
        state.withLock { state in
            if state.frames.count + found.count > cacheLimit { state.frames.removeAll(keepingCapacity: true) }
            state.frames.merge(found) { old, _ in old }
        }
        return found
    }

    /// `dladdr`'s answer: the image, and the exported symbol if any (demangled).
    static func fallback(_ address: UInt) -> SymbolicatedFrame {
        var path: UnsafePointer<CChar>? = nil
        var base: UnsafeMutableRawPointer? = nil
        var name: UnsafePointer<CChar>? = nil
        var start: UnsafeMutableRawPointer? = nil
        // safety: dladdr only reads the loader's tables for the address; an address in no image fails.
        guard tk_dladdr(UnsafeRawPointer(bitPattern: address), &path, &base, &name, &start) != 0 else {
            return SymbolicatedFrame(address: address, function: "", rawName: "", image: "?", offset: 0, location: nil, inlined: false)
        }
        let file = path.map { String(cString: $0) } ?? "?"
        let image = file.split(separator: "/").last.map(String.init) ?? file
        if let name {
            let raw = String(cString: name)
            return SymbolicatedFrame(
                address: address, function: Demangler.demangle(raw) ?? raw, rawName: raw, image: image,
                offset: address &- UInt(bitPattern: start), location: nil, inlined: false)
        }
        return SymbolicatedFrame(
            address: address, function: "", rawName: "", image: image, offset: address &- UInt(bitPattern: base),
            location: nil, inlined: false)
    }
}
