#!/usr/bin/env bash
# Sets up if needed (packages, build, default data), then runs every test with ctest, then lists the
# tests that skipped, each with its reason: a skip is not a pass (an integration script that cannot run
# its case prints "SKIP: why" and exits 77, ctest's SKIP_RETURN_CODE; a unit test calls GTEST_SKIP).
#   bash scripts/test.sh [extra ctest args, e.g. -R Config]
#   bash scripts/test.sh --skips JUNIT [MAY_SKIP]
#       only the report, from a ctest JUnit file (the last run's: BUILD/Testing/Temporary/junit.xml);
#       with MAY_SKIP (.ci/run gives .ci/may_skip) it exits 1 when a test skipped that the file does not
#       list, one "test-name  reason" a line ('#' starts a comment).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

# report_skips JUNIT [MAY_SKIP]: the skipped tests of ctest's JUnit file (status "notrun" with a <skipped>
# element: SKIP_RETURN_CODE or gtest's SKIP_REGULAR_EXPRESSION), each with the reason its output gave
# (the "SKIP:" lines of a script, gtest's "Skipped" message); with MAY_SKIP, status 1 for any not listed.
# The JUnit file, not LastTest.log: that log writes "Test Passed." for a SKIP_RETURN_CODE skip (CMake 3.25).
report_skips() {
  python3 - "$@" <<'EOF'
import re, sys
import xml.etree.ElementTree as ET

junit = sys.argv[1]
may_skip_path = sys.argv[2] if len(sys.argv) > 2 else None
try:
    cases = ET.parse(junit).getroot().iter("testcase")
except (OSError, ET.ParseError) as e:
    print(f"skipped tests: cannot read ctest's JUnit file {junit} ({e})")
    sys.exit(1)

def reason(case):
    # gtest's colours, as ctest writes the escape character into XML
    out = re.sub(r"(\x1b|\[NON-XML-CHAR-0x1B\])\[[0-9;]*m", "", case.findtext("system-out") or "")
    lines = [l.strip() for l in out.splitlines()]
    said = [l for l in lines if l.startswith("SKIP:")]
    if said:
        return " / ".join(l[len("SKIP:"):].strip() for l in said)
    for i, l in enumerate(lines):  # gtest: "file.cpp:42: Skipped" then the message
        if l.endswith(": Skipped") and i + 1 < len(lines) and lines[i + 1]:
            return lines[i + 1]
    why = case.find("skipped").get("message", "")
    return f"no reason printed ({why}); last output line: {lines[-1] if lines else '(none)'}"

skipped = [(c.get("name"), reason(c)) for c in cases if c.find("skipped") is not None]
if not skipped:
    print("skipped tests: none")
else:
    print(f"skipped tests ({len(skipped)}; a skip is not a pass):")
    for name, why in skipped:
        print(f"  {name}: {why}")
if may_skip_path is None:
    sys.exit(0)
allowed = {}
for n, line in enumerate(open(may_skip_path), 1):
    line = line.split("#", 1)[0].strip()
    if not line:
        continue
    parts = line.split(None, 1)
    if len(parts) < 2:
        print(f"{may_skip_path}:{n}: '{line}' gives no reason (a line is: test-name  reason)")
        sys.exit(1)
    allowed[parts[0]] = parts[1]
unlisted = [(name, why) for name, why in skipped if name not in allowed]
if unlisted:
    print(f"{len(unlisted)} skipped test(s) not in {may_skip_path} (everything the suite needs is installed here, so a "
          "skip is a broken install):")
    for name, why in unlisted:
        print(f"  {name}: {why}")
    sys.exit(1)
if skipped:
    print(f"every skipped test is listed in {may_skip_path} with the reason it may skip")
EOF
}

if [[ "${1:-}" == --skips ]]; then
  shift
  report_skips "$@"
  exit
fi

bash "$ROOT/scripts/setup.sh"
BUILD="${GF_BUILD_DIR:-$ROOT/build}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
cd "$BUILD"
JUNIT="$BUILD/Testing/Temporary/junit.xml"
rm -f "$JUNIT"
status=0
# One more test at a time than cores (GF_TEST_JOBS overrides): the tests wait for a fifth of their time (MPI's start-up,
# fsync, the launch tests' daemons), and on 2 cores -j3 ran the suite in 856 s where -j2 took 1056 s, all passing; with
# every test's OpenMP threads passive (CMakeLists.txt's GF_TEST_ENV) -j3 took 735 s and -j4 758 s (2-vCPU EPYC).
ctest --output-on-failure -j "${GF_TEST_JOBS:-$(($(nproc) + 1))}" --output-junit "$JUNIT" "$@" || status=$?
report_skips "$JUNIT" || true
# The last lines of each failed test's output, again at the end, where a reader of only the log's tail sees why.
[ "$status" -eq 0 ] || python3 - "$JUNIT" <<'EOF' || true
import sys
import xml.etree.ElementTree as ET
for case in ET.parse(sys.argv[1]).getroot().iter("testcase"):
    if case.get("status") == "fail" or case.find("failure") is not None:
        lines = (case.findtext("system-out") or "").rstrip().splitlines()
        print(f"--- {case.get('name')} failed; its last {min(len(lines), 15)} lines:")
        print("\n".join(lines[-15:]))
EOF
exit "$status"
