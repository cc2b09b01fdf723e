#!/usr/bin/env bash
# Documentation CI for ThreadKit (issue 27): the DocC catalogs
# (Sources/ThreadKit/ThreadKit.docc, Sources/ThreadKitMetrics/ThreadKitMetrics.docc,
# Sources/ThreadKitPostgres/ThreadKitPostgres.docc, Sources/ThreadKitGLib/ThreadKitGLib.docc) built by
# swiftlang/swift-docc-plugin, warning-free, as a static website, opened in a browser.
#
#   1. `swift package generate-documentation` for ThreadKit and for ThreadKitPostgres with
#      --warnings-as-errors: a broken ``symbol`` or <doc:article> link, an ambiguous one, a bad
#      parameter list in a doc comment fails the run. Each run is also the static-hosting build
#      (--transform-for-static-hosting --hosting-base-path NAME), written to $TK_DOCS_SITE/NAME
#      (threadkit, threadkit-postgres), so the site is built once, not twice. Any line with
#      "warning:" in the output fails the run too.
#      Compiler-synthesized symbols (a protocol's default implementations, such as OptionSet's
#      union(_:)) are left out of the pages (--experimental-skip-synthesized-symbols): the pages
#      and the coverage figure are about what this package declares.
#   2. Documentation coverage (--experimental-documentation-coverage, brief summary on stdout and
#      documentation-coverage.json in each archive), and the public symbols without a doc comment,
#      per file, in $TK_DOCS_SITE/undocumented.txt. TK_DOCS_REQUIRE_FULL_COVERAGE=1 fails the run
#      while that list is not empty.
#   3. DocumentationTests, run from the test bundle with TK_DOCS_SITE set: every article's swift
#      code is the code those tests compile and run, and the static site renders in headless
#      Chromium (landing page and TKThread's page, read back from the DOM).
# Needs python3 (the tests serve the site with `python3 -m http.server`) and chromium (installed
# here when missing, as .ci/run does). Run from a clean clone or after .ci/run's build.
# The plugin's symbol-graph builds all run in .build-traits ($TK_POSTGRES_SCRATCH, shared with CI's
# step for the package traits Postgres and GLib, Package.swift), with those traits, where that
# step has built everything: they compile nothing again. In .build they did: ThreadKit once more
# (and the test build below compiled it back), and for ThreadKitMetrics its Postgres-trait
# dependency (ThreadKitPostgres, so PostgresNIO, SwiftNIO and swift-crypto: about two minutes on
# 2 cores). With the traits on, ThreadKitMetrics's pages and coverage include its Postgres-trait
# API (TKPostgresQueueMetrics) too.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$SECONDS
step() { echo; echo "=== docs [$((SECONDS - start))s] $*"; }

site=${TK_DOCS_SITE:-$(mktemp -d /tmp/threadkit-docs.XXXXXX)}
mkdir -p "$site"
site=$(cd "$site" && pwd)
export TK_DOCS_SITE=$site
# The four catalogs are built with the Postgres and GLib traits in their own scratch directory (so
# the default build in .build is never rebuilt with other flags), as in CI, so they share one build.
pg_scratch=${TK_POSTGRES_SCRATCH:-.build-traits}
export TK_POSTGRES_SCRATCH=$pg_scratch

if ! command -v chromium >/dev/null; then
    step "installing chromium (for DocumentationTests)"
    SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
    $SUDO apt-get update && $SUDO apt-get install -y chromium
fi
export TK_REQUIRE_CHROMIUM=1

# ThreadKitPostgres last: the typecheck of its articles below reads the compile command its
# symbol-graph build leaves in $pg_scratch/debug.yaml.
for pair in ThreadKit:threadkit ThreadKitMetrics:threadkit-metrics ThreadKitGLib:threadkit-glib ThreadKitPostgres:threadkit-postgres; do
    target=${pair%%:*}
    base=${pair##*:}
    step "generate-documentation --target $target (warnings are errors; static hosting at /$base)"
    rm -rf "${site:?}/$base"
    log=$site/docc-$target.log
    swift package --scratch-path "$pg_scratch" --traits Postgres,GLib --disable-sandbox generate-documentation --target "$target" \
        --warnings-as-errors \
        --transform-for-static-hosting --hosting-base-path "$base" --output-path "$site/$base" \
        --experimental-skip-synthesized-symbols \
        --experimental-documentation-coverage --coverage-summary-level brief \
        2>&1 | tee "$log"
    if grep -E "warning:" "$log"; then
        echo "docs: generate-documentation for $target printed warnings (above); the documentation builds warning-free."
        exit 1
    fi
    [ -f "$site/$base/index.html" ] || { echo "docs: no static site at $site/$base"; exit 1; }
done

step "public symbols without a doc comment"
python3 - "$site/undocumented.txt" "$pg_scratch" <<'PY'
# Reads the symbol graphs the plugin extracted (SCRATCH/*/extracted-symbols/*/TARGET/) and lists
# each public or open symbol that has no doc comment of its own module, by file. Synthesized
# symbols are left out (as in the generated pages); a comment inherited from another module
# (Swift's `description`, say) does not count, as DocC shows none by default.
import collections, glob, json, sys
out, pg_scratch = sys.argv[1], sys.argv[2]
lines, total, missing = [], 0, 0
for target in ["ThreadKit", "ThreadKitMetrics", "ThreadKitPostgres", "ThreadKitGLib"]:
    paths = sorted(glob.glob(f"{pg_scratch}/*/extracted-symbols/*/{target}/*.symbols.json"))
    if not paths:
        sys.exit(f"docs: no symbol graphs for {target} under {pg_scratch}/*/extracted-symbols")
    by_file = collections.defaultdict(list)
    for path in paths:
        for symbol in json.load(open(path))["symbols"]:
            if "::SYNTHESIZED::" in symbol["identifier"]["precise"]:
                continue
            if symbol.get("accessLevel") not in ("public", "open"):
                continue
            total += 1
            comment = symbol.get("docComment")
            if comment and comment.get("module", target) == target and any(l["text"].strip() for l in comment["lines"]):
                continue
            missing += 1
            location = symbol.get("location", {})
            file = location.get("uri", "(no source location: compiler-generated, e.g. a raw-value enum's init)").split("/Sources/", 1)[-1]
            line = location.get("position", {}).get("line", -1) + 1
            kind = symbol["kind"]["identifier"].split(".")[-1]
            by_file[file].append(f"{line}: {kind} {'.'.join(symbol['pathComponents'])}")
    for file in sorted(by_file, key=lambda f: (-len(by_file[f]), f)):
        lines.append(f"{file}: {len(by_file[file])}")
        lines.extend("    " + entry for entry in sorted(by_file[file], key=lambda e: int(e.split(":")[0])))
documented = total - missing
summary = f"{documented} of {total} public symbols have a doc comment ({100.0 * documented / max(total, 1):.1f}%); {missing} without"
open(out, "w").write(summary + "\n" + "\n".join(lines) + "\n")
print(summary)
print("per file:", ", ".join(l for l in lines if not l.startswith(" ")) or "none")
PY
if [ "${TK_DOCS_REQUIRE_FULL_COVERAGE:-0}" = 1 ] && [ "$(sed -n 1p "$site/undocumented.txt" | grep -o '; [0-9]* without' | grep -o '[0-9]*')" != 0 ]; then
    echo "docs: public symbols without a doc comment: $site/undocumented.txt"; exit 1
fi

step "ThreadKitPostgres's articles: each swift block typechecks against the module just built"
# ThreadKitTests does not link ThreadKitPostgres (it must not build postgres-nio), so the
# PostgreSQL article's code is typechecked here instead, as top-level code, with the flags SwiftPM
# compiled ThreadKitPostgres with (read from $pg_scratch/debug.yaml, as the symbol-graph build of
# ThreadKitPostgres above left it, with its modules), warnings as errors. It needs a server to
# run, so it is not run. (A `swift build --target ThreadKitPostgres` here compiled ThreadKit again
# after that build, for nothing.)
python3 - "$pg_scratch" <<'PY'
import glob, json, os, re, subprocess, sys, tempfile
yaml = open(f"{sys.argv[1]}/debug.yaml").read()
found = re.search(r'"C\.ThreadKitPostgres-[^"]*\.module":\n(?:.*\n)*?\s+args: (\[.*\])\n', yaml)
if not found:
    sys.exit(f"docs: ThreadKitPostgres's compile command is not in {sys.argv[1]}/debug.yaml (not built in debug?)")
args = json.loads(found.group(1))
keep = {"-I", "-Xcc", "-target", "-swift-version", "-sdk", "-module-cache-path", "-F"}
flags, i = [], 0
while i < len(args):
    if args[i] in keep and i + 1 < len(args):
        flags += args[i:i + 2]
        i += 2
    else:
        i += 1
failed = checked = 0
for article in sorted(glob.glob("Sources/ThreadKitPostgres/ThreadKitPostgres.docc/*.md")):
    for n, block in enumerate(re.findall(r"^```swift\n(.*?)^```$", open(article).read(), re.S | re.M), 1):
        with tempfile.TemporaryDirectory() as scratch:
            main = os.path.join(scratch, "main.swift")
            open(main, "w").write(block)
            result = subprocess.run([args[0], "-typecheck", "-warnings-as-errors"] + flags + [main])
        checked += 1
        if result.returncode != 0:
            failed += 1
            print(f"docs: {article}, swift block {n} does not typecheck (above)")
print(f"{checked} block(s) typechecked, {failed} failed")
sys.exit(1 if failed or not checked else 0)
PY

step "DocumentationTests (examples compiled and run; the site in headless Chromium)"
swift build --build-tests > "$site/build.log" 2>&1 || { tail -40 "$site/build.log"; echo "docs: the test build failed"; exit 1; }
bin=$(swift build --show-bin-path)
"$bin/ThreadKitPackageTests.xctest" ThreadKitTests.DocumentationTests 2>&1 | tee "$site/documentation-tests.log"
grep -E "Executed [0-9]+ tests?, with (.* and )?0 failures" "$site/documentation-tests.log" >/dev/null \
    || { echo "docs: DocumentationTests did not pass"; exit 1; }
grep -q "testTheStaticSiteRendersInHeadlessChromium' passed" "$site/documentation-tests.log" \
    || { echo "docs: the static-site test did not run (skipped?)"; exit 1; }

step "documentation passed: site in $site (serve it: python3 -m http.server --directory $site, open /threadkit/documentation/threadkit/)"
