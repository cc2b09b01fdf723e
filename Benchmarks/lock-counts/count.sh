#!/bin/bash
# count.sh: builds LockCountDriver.swift against the release ThreadKit (`swift build -c release
# --product ThreadKit` first) and prints, per lock+unlock pair, the instructions (callgrind: the
# run with 101,000 pairs minus the run with 1,000) and the locked instructions executed
# (locked.py), for every row, single-threaded and after one thread. Needs valgrind and objdump.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
B=$root/.build/release
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
swiftc -O -parse-as-library -module-name LockCountDriver "$here/LockCountDriver.swift" -I "$B/Modules" \
    -Xcc -fmodule-map-file="$B/CThreadKit.build/module.modulemap" -L "$B" -lThreadKit "$B"/CThreadKit.build/*.o \
    -o "$work/driver"
strip --strip-debug "$work/driver" # valgrind's reader gives up on Swift's debug info
ir() { valgrind --tool=callgrind --callgrind-out-file=/dev/null "$work/driver" "$1" "$2" 2>&1 | awk '/Collected/{gsub(",","",$4); print $4}'; }
for row in tk pt rec1 prec1 rec2 prec2 mt-tk mt-pt mt-rec1 mt-prec1 mt-rec2 mt-prec2; do
    a=$(ir $row 1000); b=$(ir $row 101000)
    valgrind --tool=callgrind --dump-instr=yes --compress-pos=no --compress-strings=no \
        --callgrind-out-file="$work/cg" "$work/driver" $row 100000 >/dev/null 2>&1
    locked=$(python3 "$here/locked.py" "$work/cg" 100000 | tail -1 | awk '{print $4}')
    printf "%-9s instructions %6.2f  locked %s\n" $row "$(echo "($b-$a)/100000" | bc -l)" "$locked"
done
