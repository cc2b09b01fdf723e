// DeadlineArithmetic: saturating conversions between Swift durations and the integer units the
// server and postgres-nio take (lock_timeout in whole milliseconds, TimeAmount in nanoseconds),
// and instants a bounded distance ahead. A caller may pass any Duration or far deadline
// (`.now + .seconds(Int64.max)`, a configuration's timeout of years); none of these may trap.
// Stateless; any thread.
#if Postgres

    enum DeadlineArithmetic {
        /// The longest duration ever added to an instant here: 100 years, "no limit" in practice, and
        /// far from the end of ContinuousClock.Instant's range whatever the clock reads.
        static let longest: Duration = .seconds(100 * 365 * 86_400)

        /// `instant + duration`, the duration taken as at most `longest` (and at least zero).
        static func instant(_ duration: Duration, after instant: ContinuousClock.Instant = .now) -> ContinuousClock.Instant {
            instant + min(max(duration, .zero), longest)
        }

        /// Whole nanoseconds, saturating at Int64's bounds (TimeAmount's unit).
        static func nanoseconds(_ duration: Duration) -> Int64 {
            let (seconds, attoseconds) = duration.components
            let limit = Int64.max / 1_000_000_000 - 1
            if seconds > limit { return .max }
            if seconds < -limit { return .min }
            return seconds * 1_000_000_000 + attoseconds / 1_000_000_000
        }

        /// Whole milliseconds rounded up (a server-side wait of that many never ends early), 0 for a
        /// duration that is not positive, saturating at Int64.max.
        static func millisecondsRoundedUp(_ duration: Duration) -> Int64 {
            guard duration > .zero else { return 0 }
            let (seconds, attoseconds) = duration.components
            if seconds > Int64.max / 1_000 - 1 { return .max }
            return seconds * 1_000 + (attoseconds + 999_999_999_999_999) / 1_000_000_000_000_000
        }
    }
#endif
