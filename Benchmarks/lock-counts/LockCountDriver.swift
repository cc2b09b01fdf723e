// LockCountDriver: N uncontended lock+unlock pairs of one lock, for counting instructions and
// locked instructions under callgrind (count.sh), never for timing. Single-threaded unless the
// row's name starts with `mt-`, which first starts and joins one thread (glibc's mutexes, and ours,
// take a plain-store path while the process has had one thread).
//   tk, pt            TKLock, pthread_mutex (default type)
//   rec1, prec1       TKRecursiveLock, recursive pthread_mutex: depth 1 (take and release)
//   rec2, prec2       the same at depth 2: held once outside the loop, the pair is the re-entry
import ThreadKit
import Glibc

@inline(never) func tk(_ l: TKLock, _ n: Int) { for _ in 0..<n { l.lock(); l.unlock() } }
@inline(never) func pt(_ m: UnsafeMutablePointer<pthread_mutex_t>, _ n: Int) { for _ in 0..<n { pthread_mutex_lock(m); pthread_mutex_unlock(m) } }
@inline(never) func rec1(_ l: TKRecursiveLock, _ n: Int) { for _ in 0..<n { l.lock(); l.unlock() } }
@inline(never) func rec2(_ l: TKRecursiveLock, _ n: Int) { l.lock(); for _ in 0..<n { l.lock(); l.unlock() }; l.unlock() }
@inline(never) func prec2(_ m: UnsafeMutablePointer<pthread_mutex_t>, _ n: Int) { pthread_mutex_lock(m); for _ in 0..<n { pthread_mutex_lock(m); pthread_mutex_unlock(m) }; pthread_mutex_unlock(m) }

@main struct Main { static func main() {
var which = CommandLine.arguments[1]
if which.hasPrefix("mt-") {
    which.removeFirst(3)
    var t = pthread_t()
    pthread_create(&t, nil, { _ in nil }, nil)
    pthread_join(t, nil)
}
let n = Int(CommandLine.arguments[2])!
let m = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
pthread_mutex_init(m, nil)
let rm = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
var attr = pthread_mutexattr_t(); pthread_mutexattr_init(&attr)
pthread_mutexattr_settype(&attr, Int32(PTHREAD_MUTEX_RECURSIVE)); pthread_mutex_init(rm, &attr)
let l = TKLock(); let r = TKRecursiveLock()
switch which {
case "tk": tk(l, n)
case "pt": pt(m, n)
case "rec1": rec1(r, n)
case "rec2": rec2(r, n)
case "prec1": pt(rm, n)
case "prec2": prec2(rm, n)
default: fatalError()
}
} }
