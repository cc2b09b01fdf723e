// ThreadBenchmarks: create + start + join of a thread running an empty body — TKThread against
// Foundation's Thread (joined through a semaphore, as it has no join) and raw
// pthread_create/pthread_join; and a thread-local read against pthread_getspecific.
import Foundation
import ThreadKit

enum ThreadBenchmarks {
    static func rows() -> [Row] { [createJoin(), threadLocal()] }

    static func createJoin() -> Row {
        Row(
            group: "threads", name: "create+start+join, empty thread", operations: 200, unit: .microseconds,
            contenders: [
                Contender(name: "TKThread") { n in
                    timed {
                        for _ in 0..<n {
                            let t = TKThread {}
                            t.start()
                            t.join()
                        }
                    }
                },
                Contender(name: "Foundation Thread") { n in
                    timed {
                        for _ in 0..<n {
                            let done = DispatchSemaphore(value: 0)
                            Thread { done.signal() }.start()
                            done.wait()
                        }
                    }
                },
                Contender(name: "pthread_create+join") { n in
                    timed {
                        for _ in 0..<n {
                            var handle = pthread_t()
                            pthread_create(&handle, nil, { _ in nil }, nil)
                            pthread_join(handle, nil)
                        }
                    }
                },
            ], reference: "pthread_create+join", target: "≤ 1.2× pthreads, ≤ 1.0× Foundation")
    }

    static func threadLocal() -> Row {
        let local = TKThreadLocal<Int>()
        local.value = 1
        var key = pthread_key_t()
        pthread_key_create(&key, nil)
        pthread_setspecific(key, UnsafeRawPointer(bitPattern: 1))
        let k = key
        return Row(
            group: "threads", name: "thread-local get", operations: 5_000_000, unit: .nanoseconds,
            contenders: [
                Contender(name: "TKThreadLocal.value") { n in
                    timed {
                        var s = 0
                        for _ in 0..<n { s &+= local.value! }
                        blackHole(s)
                    }
                },
                Contender(name: "pthread_getspecific") { n in
                    timed {
                        var s = 0
                        for _ in 0..<n { s &+= Int(bitPattern: pthread_getspecific(k)) }
                        blackHole(s)
                    }
                },
            ], reference: "pthread_getspecific", target: "≤ 1.5× pthread_getspecific")
    }
}
