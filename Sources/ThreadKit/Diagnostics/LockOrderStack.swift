// LockOrderStack and LockOrderThread: where and on which thread a lock order (or a hang) was
// seen, for reports (docs/Diagnostics.md §1, §2). Immutable values; captured on the thread they
// describe, symbolized on whichever thread prints the report.
import CThreadKit
import Glibc

/// Where an edge was first seen: return addresses, symbolized only when a report needs them.
struct LockOrderStack: Sendable {
    let addresses: [UInt]

    /// The caller's stack, without this function and `skipping` more frames.
    static func capture(skipping: Int) -> LockOrderStack {
        var buffer = [UnsafeMutableRawPointer?](repeating: nil, count: 48)
        let n = Int(buffer.withUnsafeMutableBufferPointer { tk_backtrace($0.baseAddress, 48) })
        let start = min(n, skipping + 1)
        return LockOrderStack(addresses: buffer[start..<n].map { UInt(bitPattern: $0) })
    }

    /// Symbolized frames, with ThreadKit's own leading frames (the lock's hook) dropped.
    var symbols: [String] { LockOrderStack.symbolize(addresses, dropLeadingThreadKitFrames: true) }

    static func symbolize(_ addresses: [UInt], dropLeadingThreadKitFrames: Bool, limit: Int = 24) -> [String] {
        var frames = addresses.map { UnsafeMutableRawPointer(bitPattern: $0) }
        let count = Int32(frames.count)
        guard count > 0, let symbols = frames.withUnsafeMutableBufferPointer({ tk_backtrace_symbols($0.baseAddress, count) }) else {
            return addresses.map { "0x\(String($0, radix: 16))" }
        }
        defer { free(symbols) }
        var lines = (0..<frames.count).map { symbols[$0].map { CallStackSymbol(String(cString: $0)).readable } ?? "?" }
        if dropLeadingThreadKitFrames {
            // The hook's own frames: up to the last ThreadKit-named one near the top (private
            // helpers between them are not exported, so they show as bare addresses).
            let own = lines.prefix(8).lastIndex { line in
                let symbol = line.drop { $0 != " " }.dropFirst() // after "image "
                return symbol.hasPrefix("ThreadKit.") || symbol.hasPrefix("static ThreadKit.")
            }
            if let own, own + 1 < lines.count { lines.removeFirst(own + 1) }
        }
        return Array(lines.prefix(limit))
    }
}

/// The thread an edge was seen on, for reports.
struct LockOrderThread: Sendable {
    let tid: UInt32
    let name: String

    static func current() -> LockOrderThread {
        let tid = SystemCall.currentThreadID
        return LockOrderThread(tid: tid, name: name(of: tid))
    }

    static func name(of tid: UInt32) -> String {
        var buffer = [CChar](repeating: 0, count: 32)
        guard tk_thread_name(tid, &buffer, 32) > 0 else { return "" }
        return String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    var description: String { name.isEmpty ? "thread \(tid)" : "thread \(tid) \"\(name)\"" }
}
