// TKThread+CallStack: the calling thread's return addresses and their symbols (NSThread's
// callStackReturnAddresses / callStackSymbols), captured and symbolicated the way reports are
// (CallStack, Symbolicator: docs/Diagnostics.md §7). Stateless; any thread.

extension TKThread {
    /// The return addresses on the calling thread's stack, innermost first.
    public static var callStackReturnAddresses: [UInt] {
        CallStack.capture(skipping: 1).addresses
    }

    /// One line per frame, innermost first, every frame (nothing folded): index, function
    /// (demangled), offset, file:line where debug information has it, and image; `image +0xoffset`
    /// where no symbol is known. Inlined frames get a line each, sharing their caller's index.
    public static var callStackSymbols: [String] {
        let addresses = CallStack.capture(skipping: 1).addresses
        var lines: [String] = []
        for (index, frames) in Symbolicator.frames(at: addresses).enumerated() {
            for frame in frames { lines.append("\(index) \(frame.text)") }
        }
        return lines
    }
}
