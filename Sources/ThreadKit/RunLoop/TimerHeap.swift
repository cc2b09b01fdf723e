// TimerHeap: a run-loop mode's timers in the one heap design (System/DeadlineHeap.swift). An
// entry names a timer and the generation of its fire date it was pushed for; the loop drops
// entries of an old generation, of an invalid timer, or of a timer removed from the mode.
// Guarded by the run loop's lock.

/// What a run-loop heap entry points at.
struct TimerReference {
    let timer: TKTimer
    let generation: UInt64
}

typealias TimerHeap = DeadlineHeap<TimerReference>

extension DeadlineHeap where Payload == TimerReference {
    mutating func push(_ timer: TKTimer, deadline: ContinuousClock.Instant, generation: UInt64) {
        push(TimerReference(timer: timer, generation: generation), deadline: deadline)
    }
}

extension DeadlineHeap.Entry where Payload == TimerReference {
    var timer: TKTimer { payload.timer }
    var generation: UInt64 { payload.generation }
}
