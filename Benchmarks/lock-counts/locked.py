#!/usr/bin/env python3
# locked.py CALLGRIND_OUT N (count.sh runs it): executed locked instructions (lock prefix, xchg
# with memory) per iteration, per object and function, from a callgrind run with --dump-instr=yes
# --compress-pos=no --compress-strings=no. Addresses there are object file offsets, so objdump of the object gives
# the instruction at each.
import re, subprocess, sys, collections
out, n = sys.argv[1], int(sys.argv[2])
cost = collections.defaultdict(int)  # (ob, fn, addr) -> Ir
ob = fn = None; skip = False
for line in open(out):
    if line.startswith('ob='): ob = line[3:].strip(); continue
    if line.startswith('fn='): fn = line[3:].strip(); continue
    if line.startswith('calls='): skip = True; continue
    m = re.match(r'^(0x[0-9a-f]+) \S+ (\d+)', line)
    if m:
        if skip: skip = False; continue
        cost[(ob, fn, int(m.group(1), 16))] += int(m.group(2))
dis = {}
def locked_addrs(path):
    if path not in dis:
        s = set()
        try:
            txt = subprocess.run(['objdump', '-d', '--no-show-raw-insn', path], capture_output=True, text=True).stdout
        except Exception: txt = ''
        for l in txt.splitlines():
            m = re.match(r'^\s*([0-9a-f]+):\s+(.*)$', l)
            if m and (re.match(r'lock\b', m.group(2)) or (m.group(2).startswith('xchg') and '(' in m.group(2))):
                s.add(int(m.group(1), 16))
        dis[path] = s
    return dis[path]
tot = 0
for (o, f, a), c in sorted(cost.items()):
    if o and o.startswith('/') and a in locked_addrs(o) and c >= n // 2:
        print(f'  {c/n:5.2f}/iter  {o.split("/")[-1]} {f} +{a:#x}')
        tot += c
print(f'locked per iteration: {tot/n:.2f}')
