// Duration+Kernel: the one place a Swift Duration becomes the numbers a kernel call takes, and the
// one place a repeating schedule is advanced past missed slots. Both are exact (Int128
// attoseconds) and saturate instead of trapping: a Duration can hold about 5.4 × 10^21 years, and
// `Duration.components` traps once its seconds pass Int64.max, as does `Int(double)` on a count of
// missed intervals beyond Int.max. Pure functions; any thread.

extension Duration {
    /// Whole seconds and the nanoseconds below them, for a relative kernel timespec (futex,
    /// timerfd). Negative durations give (0, 0); seconds beyond Int64.max saturate (the kernel
    /// itself caps a timeout at KTIME_MAX, about 292 years).
    var kernelTimespec: (seconds: Int64, nanoseconds: Int64) {
        let total = attoseconds
        guard total > 0 else { return (0, 0) }
        let seconds = total / 1_000_000_000_000_000_000
        guard seconds <= Int128(Int64.max) else { return (Int64.max, 999_999_999) }
        return (Int64(seconds), Int64(total % 1_000_000_000_000_000_000 / 1_000_000_000))
    }

    /// Whole milliseconds, rounded up, for a poll(2) timeout: 0 for durations not positive,
    /// Int32.max (about 24 days; callers loop) for longer ones.
    var pollMilliseconds: Int32 {
        let total = attoseconds
        guard total > 0 else { return 0 }
        let ms = (total + 999_999_999_999_999) / 1_000_000_000_000_000
        return ms > Int128(Int32.max) ? Int32.max : Int32(ms)
    }
}

/// A repeating schedule: slots `start + k × interval` for k = 0, 1, 2, …
enum RepeatingSchedule {
    /// The slots at or before `now` not yet fired, counting `start` itself (0 when `start` is
    /// after `now`; saturated at UInt64.max), and the first slot strictly after `now`. `interval`
    /// must be positive. A next slot beyond what an Instant can hold becomes the furthest one this
    /// schedule can express without overflow (it will not come within the life of the process).
    static func advance(
        start: ContinuousClock.Instant, interval: Duration,
        now: ContinuousClock.Instant
    ) -> (passed: UInt64, next: ContinuousClock.Instant) {
        let step = interval.attoseconds
        precondition(step > 0, "RepeatingSchedule.advance: the interval must be positive")
        guard start <= now else { return (0, start) }
        // now - start cannot overflow: both are instants of one clock, at most 2 × Duration's range
        // apart only for inputs built from deliberately overflowing sums, which trap in the caller.
        let elapsed = (now - start).attoseconds
        let (whole, _) = elapsed.quotientAndRemainder(dividingBy: step)
        let passed = whole + 1 // start itself, and every slot up to now
        let (offset, overflow) = passed.multipliedReportingOverflow(by: step)
        let count = passed > Int128(UInt64.max) ? UInt64.max : UInt64(passed)
        guard !overflow else { return (count, now + Duration(attoseconds: Int128.max / 4)) }
        return (count, start + Duration(attoseconds: offset))
    }
}
