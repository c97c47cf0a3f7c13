#!/usr/bin/env bash
# The suite's skips are seen (scripts/test.sh, .ci/run, .ci/may_skip): on a machine where sshd and the
# Slurm daemons cannot start, simulated by a small ctest project of our own whose tests do what the real
# ones do there (two_servers.sh and slurm.sh print "SKIP: why" and exit 77, a gtest case prints its
# "Skipped" message), ctest's JUnit file marks them skipped and
#   (a) `scripts/test.sh --skips JUNIT`, the report test.sh prints after ctest, names each skipped test with
#       its reason, and neither the test that passed nor the one that printed "SKIP:" and then failed;
#   (b) with .ci/may_skip, as .ci/run gives it, it exits 1 naming the Hosts tests, and not the test the
#       file lists (HFTokenizerReal.FromEnvironment);
#   (c) an allow-list naming every skipped test with a reason passes, one line without a reason fails;
#   (d) .ci/run runs the README's test command and then this check on the JUnit file test.sh writes, and
#       every line of .ci/may_skip gives a reason.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh" "$@"
command -v ctest > /dev/null || fail "no ctest (scripts/setup.sh installs cmake)"

mkdir fake
cat > fake/CMakeLists.txt <<'EOF'
cmake_minimum_required(VERSION 3.21)
project(fake NONE)
enable_testing()
add_test(NAME integration.two_servers COMMAND bash -c "echo 'server a up'; echo 'SKIP: two_servers: sshd in a network namespace did not answer ssh: Connection refused'; exit 77")
add_test(NAME integration.slurm COMMAND bash -c "echo 'SKIP: slurm: the Slurm daemons did not come up (node state down)'; exit 77")
add_test(NAME HFTokenizerReal.FromEnvironment COMMAND bash -c "printf '[ RUN      ] HFTokenizerReal.FromEnvironment\\n/src/hf_tokenizer_sp_test.cpp:263: Skipped\\nGF_HF_REAL_CASES / GF_HF_REAL_CORPUS not set\\n\\033[0;32m[  SKIPPED ] \\033[mHFTokenizerReal.FromEnvironment (0 ms)\\n'")
add_test(NAME integration.passes COMMAND bash -c "echo 'passes: all checks passed'")
add_test(NAME integration.fails_after_skip_line COMMAND bash -c "echo 'SKIP: not a skip'; exit 1")
set_tests_properties(integration.two_servers integration.slurm integration.passes integration.fails_after_skip_line
                     PROPERTIES SKIP_RETURN_CODE 77)
set_tests_properties(HFTokenizerReal.FromEnvironment PROPERTIES SKIP_REGULAR_EXPRESSION "\\[  SKIPPED \\]")
EOF
cmake -S fake -B fake/build > cmake.log 2>&1 || { cat cmake.log; fail "cmake of the fake project"; }
run ctest ctest --test-dir fake/build --output-junit "$WORK/junit.xml"
((STATUS != 0)) || fail "ctest passed a project with a failing test"
grep -q 'status="notrun"' junit.xml || fail "ctest's JUnit file marks no test skipped: $(cat junit.xml)"

# (a) The report.
run report bash "$SRC/scripts/test.sh" --skips junit.xml
((STATUS == 0)) || { cat report.log; fail "the report without an allow-list exited $STATUS"; }
cat report.log
grep -qx "skipped tests (3; a skip is not a pass):" report.log || fail "not 3 skipped tests"
grep -qxF "  integration.two_servers: two_servers: sshd in a network namespace did not answer ssh: Connection refused" report.log \
  || fail "two_servers and its reason not reported"
grep -qxF "  integration.slurm: slurm: the Slurm daemons did not come up (node state down)" report.log || fail "slurm not reported"
grep -qxF "  HFTokenizerReal.FromEnvironment: GF_HF_REAL_CASES / GF_HF_REAL_CORPUS not set" report.log \
  || fail "the gtest skip's message not reported"
! grep -q "passes\|fails_after_skip_line" report.log || fail "a test that passed or failed was reported as skipped"
ok "(a) the skipped tests and their reasons reported"

# (b) CI's allow-list: the Hosts tests are not in it, so the check fails and names them.
run ci bash "$SRC/scripts/test.sh" --skips junit.xml "$SRC/.ci/may_skip"
((STATUS == 1)) || { cat ci.log; fail "the CI check exited $STATUS with unlisted skips"; }
grep -qx "2 skipped test(s) not in $SRC/.ci/may_skip .*" ci.log || { cat ci.log; fail "not 2 unlisted skips"; }
sed -n '/not in/,$p' ci.log | grep -q "integration.two_servers: two_servers: sshd" || fail "two_servers not named"
sed -n '/not in/,$p' ci.log | grep -q "integration.slurm: slurm:" || fail "slurm not named"
! sed -n '/not in/,$p' ci.log | grep -q "HFTokenizerReal" || fail "the listed test was counted against CI"
ok "(b) .ci/may_skip fails the run on the Hosts tests' skips"

# (c) Every skip listed with a reason: passes; a name without a reason: refused.
{ echo "# a comment"; echo "integration.two_servers  no network namespaces here"
  echo "integration.slurm  no Slurm here"; echo "HFTokenizerReal.FromEnvironment  run by its script"; } > all.txt
run all bash "$SRC/scripts/test.sh" --skips junit.xml all.txt
((STATUS == 0)) || { cat all.log; fail "a full allow-list exited $STATUS"; }
grep -q "every skipped test is listed in all.txt" all.log || fail "$(cat all.log)"
echo "integration.slurm" > bare.txt
run bare bash "$SRC/scripts/test.sh" --skips junit.xml bare.txt
((STATUS == 1)) && grep -q "bare.txt:1: 'integration.slurm' gives no reason" bare.log || { cat bare.log; fail "a line without a reason"; }
run none bash "$SRC/scripts/test.sh" --skips "$WORK/no_such.xml"
((STATUS == 1)) && grep -q "cannot read ctest's JUnit file" none.log || { cat none.log; fail "a missing JUnit file"; }
ok "(c) a full allow-list passes, a reasonless line and a missing file fail"

# (d) .ci/run: the README's test command, then the check on the file test.sh writes; .ci/may_skip's lines.
grep -q '^bash scripts/test.sh         # ' "$SRC/README.md" || fail "README's test command is not bash scripts/test.sh"
grep -qxF 'bash scripts/test.sh' "$SRC/.ci/run" || fail ".ci/run does not run the README's command"
grep -qxF 'bash scripts/test.sh --skips "${GF_BUILD_DIR:-build}/Testing/Temporary/junit.xml" .ci/may_skip' "$SRC/.ci/run" \
  || fail ".ci/run does not check the skips against .ci/may_skip"
grep -qF 'JUNIT="$BUILD/Testing/Temporary/junit.xml"' "$SRC/scripts/test.sh" \
  && grep -qF -- '--output-junit "$JUNIT"' "$SRC/scripts/test.sh" && grep -q '^report_skips "$JUNIT"' "$SRC/scripts/test.sh" \
  || fail "scripts/test.sh does not write the JUnit file .ci/run reads and report from it"
while read -r name reason; do
  [[ -z "$name" || "$name" == \#* ]] && continue
  [[ -n "$reason" ]] || fail ".ci/may_skip lists $name without a reason"
done < "$SRC/.ci/may_skip"
ok "(d) .ci/run runs bash scripts/test.sh, then checks its JUnit file against .ci/may_skip"
echo "skip_report: all checks passed"
