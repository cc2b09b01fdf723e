// CallStack: the one way reports capture a stack, and how they print one (docs/Diagnostics.md
// §7). Captured where the report is made — return addresses only, `backtrace()` (tk_backtrace) into
// a buffer of 64 (the hang sampler's signal handler captures into its own static buffer,
// CThreadKitLockOrder.h) — and symbolicated (Symbolicator) only when a report is read or printed,
// on the thread that reads it. Printed with the call site first: the first frame of the caller's
// code above ThreadKit's and the system's frames, then the frames above it, ThreadKit's own runs
// folded into one line each (`TKDiagnostics.foldsThreadKitFrames`).
//
// Threads: an immutable value; any thread. `foldsFrames` is an Atomic.
import CThreadKit
import Synchronization

struct CallStack: Sendable {
    /// Return addresses, innermost first.
    let addresses: [UInt]

    /// Addresses captured at most.
    static let captureLimit = 64
    /// Lines a printed stack has at most (past it: `… N more frames`).
    static let lineLimit = 24

    /// The caller's stack, without this function and `skipping` more frames.
    @inline(never)
    static func capture(skipping: Int) -> CallStack {
        // Called here, not in a closure, so that frame 0 is this function's in every build.
        let buffer = UnsafeMutablePointer<UnsafeMutableRawPointer?>.allocate(capacity: captureLimit)
        defer { buffer.deallocate() }
        let n = Int(tk_backtrace(buffer, Int32(captureLimit)))
        let start = min(n, skipping + 1)
        // safety: tk_backtrace wrote n ≤ captureLimit entries.
        return CallStack(addresses: (start..<n).map { UInt(bitPattern: buffer[$0]) })
    }

    /// Every frame, innermost first, inlined frames expanded.
    var frames: [SymbolicatedFrame] { CallStack.merged(Symbolicator.frames(at: addresses).flatMap { $0 }) }

    /// Without the second of two frames at one address that name one function (a specialization
    /// and the function it specializes, which DWARF lists as inlined into it).
    static func merged(_ frames: [SymbolicatedFrame]) -> [SymbolicatedFrame] {
        var kept: [SymbolicatedFrame] = []
        for frame in frames {
            if let last = kept.last, last.address == frame.address || frame.inlined, !frame.function.isEmpty,
                last.function.hasSuffix(frame.function) || frame.function.hasSuffix(last.function)
            {
                continue
            }
            kept.append(frame)
        }
        return kept
    }

    /// Index in `frames` of the call site: the first frame of the caller's code above the
    /// leading ThreadKit and system frames. Without names for the caller's code (a stripped
    /// binary), the first unnamed frame after the last named ThreadKit or system frame (ThreadKit's
    /// public entry points are exported). nil when every frame is ThreadKit's or the system's.
    static func callSite(in frames: [SymbolicatedFrame]) -> Int? {
        var unnamedRun: Int?
        for (index, frame) in frames.enumerated() {
            switch frame.owner {
            case .threadKit, .system: unnamedRun = nil
            case .unnamed: if unnamedRun == nil { unnamedRun = index }
            case .caller: return unnamedRun ?? index
            }
        }
        return unnamedRun
    }

    /// The stack as a report prints it, one frame a line (see the file comment).
    var lines: [String] { CallStack.lines(of: frames, folding: TKDiagnostics.foldsThreadKitFrames) }

    static func lines(of frames: [SymbolicatedFrame], folding: Bool) -> [String] {
        guard !frames.isEmpty else { return [] }
        var lines: [String] = []
        var next = 0
        if let site = callSite(in: frames) {
            var line = frames[site].text + "  <- call site"
            if site > 0 && folding {
                let called = frames[site - 1].function.isEmpty ? frames[site - 1].text : frames[site - 1].function
                line += ", in \(called)"
                if site > 1 {
                    // Where inside ThreadKit it is: its innermost Swift frame (Parking.park for a wait).
                    let innermost = frames[..<(site - 1)].first {
                        $0.owner == .threadKit && $0.rawName.hasPrefix("$s") && !isHook($0)
                    }
                    let inside = innermost.map { ", down to \($0.function)" } ?? ""
                    line += " (\(site - 1) more frames folded\(inside))"
                }
            } else if site > 0 {
                lines = frames[..<site].map(\.text)
            }
            lines.append(line)
            next = site + 1
        }
        while next < frames.count && lines.count < lineLimit {
            let frame = frames[next]
            if folding && frame.owner == .threadKit && !lines.isEmpty {
                var end = next
                while end < frames.count && frames[end].owner == .threadKit { end += 1 }
                let run = end - next
                lines.append("… \(run) ThreadKit frame\(run == 1 ? "" : "s") folded (\(frame.function))")
                next = end
            } else {
                lines.append(frame.text)
                next += 1
            }
        }
        if next < frames.count { lines.append("… \(frames.count - next) more frames") }
        return lines
    }

    /// A frame of the diagnostics that captured the stack (not where the thread is).
    private static func isHook(_ frame: SymbolicatedFrame) -> Bool {
        ["BlockingChecker.", "LockOrder.", "Contention.", "CallStack.", "ThreadDumper."].contains { frame.function.contains($0) }
    }

    static let foldsFrames = Atomic<Bool>(true)
}

extension TKDiagnostics {
    /// Whether reports fold ThreadKit's own frames (true by default): a stack starts at the call
    /// site, the caller's frame that called into ThreadKit, and each run of ThreadKit frames above
    /// it is one line. false prints every frame, the call site marked.
    public static var foldsThreadKitFrames: Bool {
        get { CallStack.foldsFrames.load(ordering: .relaxed) }
        set { CallStack.foldsFrames.store(newValue, ordering: .relaxed) }
    }
}
