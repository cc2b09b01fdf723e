#!/usr/bin/env bash
# Checks the house rule that every unsafe construct says why it is safe (STYLE.md; issue 51):
#   - in the dispatch pool (Sources/ThreadKit/Dispatch/Pool) and System/JobRing.swift, every line
#     that uses an unsafe pointer, Unmanaged, unowned(unsafe), an unsafe addressor or bit cast,
#     memory binding, a raw allocation, a pointer's initialize/move, or @exclusivity(unchecked);
#   - everywhere in Sources/, every `@unchecked Sendable`;
# must have a `// safety:` comment on the line itself or above it: in the comment block right
# above, or with at most 2 lines of code between (one note may cover a short run of sites). A
# declaration may instead open with the note, in the comment lines right below it.
# Prints each site without one and fails if there is any. Run from the repository root:
# `bash .ci/safety-lint.sh`.
set -euo pipefail
cd "$(dirname "$0")/.."

unsafe='Unsafe[A-Za-z]*Pointer|unowned\(unsafe\)|\.move\(\)|moveInitialize|\.initialize\(|Unmanaged|_withUnsafeGuaranteedRef|unsafe(Mutable)?Address|unsafeBitCast|assumingMemoryBound|bindMemory|\.allocate\(|@exclusivity\(unchecked\)|@unchecked Sendable'
sendable='@unchecked Sendable'

check() { # pattern files...
    local pattern=$1
    shift
    awk -v pattern="$pattern" '
        function report(at, text) { printf "%s:%d: no // safety: note: %s\n", FILENAME, at, text; missing++ }
        FNR == 1 { if (pendingAt) report(pendingAt, pendingText); n = 0; pendingAt = 0 }
        pendingAt && /^[ \t]*\/\// { if ($0 ~ /\/\/ safety:/) pendingAt = 0 }
        pendingAt && !/^[ \t]*\/\// { report(pendingAt, pendingText); pendingAt = 0 }
        {
            line[++n] = $0
            code = $0
            sub(/\/\/.*$/, "", code)          # the pattern must be in code, not in a comment
            if (code !~ pattern) next
            if ($0 ~ /\/\/ safety:/) next
            covered = 0; codeLines = 0
            for (i = n - 1; i >= 1 && i >= n - 40; i--) {
                if (line[i] ~ /^[ \t]*\/\//) {
                    if (line[i] ~ /\/\/ safety:/) { covered = 1; break }
                    continue
                }
                if (line[i] ~ /\/\/ safety:/) { covered = 1; break }
                if (line[i] ~ /^[ \t]*$/) continue
                if (++codeLines > 2) break
            }
            # Not covered from above: a note may still open the declaration, just below it.
            if (!covered) { pendingAt = FNR; pendingText = $0 }
        }
        END { if (pendingAt) report(pendingAt, pendingText); exit missing > 0 }
    ' "$@"
}

status=0
check "$unsafe" Sources/ThreadKit/Dispatch/Pool/*.swift Sources/ThreadKit/System/JobRing.swift || status=1
mapfile -t all < <(grep -rlE "$sendable" Sources --include='*.swift' | sort)
check "$sendable" "${all[@]}" || status=1
if [ "$status" != 0 ]; then
    echo "safety-lint: the sites above need a \`// safety:\` line saying why they are safe" >&2
fi
exit "$status"
