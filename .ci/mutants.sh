#!/usr/bin/env bash
# Mutation testing with cargo-mutants: every mutant of the core's planner (plan.rs) and staging
# pool (staging.rs) must be caught by the core's tests and the tokio backend's (its conformance
# suite drives the ledger through real files), time out (an infinite loop the tests' time box
# catches), fail to build, or be listed with its reason in .ci/mutants-equivalent.txt.
#
# Cost: about 130 mutants, 2 s of incremental build and 4 s of tests each, 8-10 minutes on this
# 2-core machine. In place (the work tree is mutated and restored, mutant by mutant), so the build
# is incremental. The 10,000-operation schedules, drop storms, load test and real-fault tests are
# skipped: they take minutes each and reach the same code as the conformance suite.
#
# Not yet covered (each is a longer run than CI affords today, and its survivors need triage
# first): the gather ledger (gather.rs), the sink (sink.rs) and the io_uring lane (lane.rs).
set -euo pipefail
cd "$(dirname "$0")/.."
# Each mutant is one small edit in place: incremental builds make it 2 s instead of 8 s (CI turns
# incremental off for everything else).
export CARGO_INCREMENTAL=1
command -v cargo-mutants >/dev/null || cargo install cargo-mutants --locked --version 27.1.0
out=target/mutants
rm -rf "$out"
status=0
cargo mutants --in-place --no-shuffle -p eagerio-core \
  --file crates/eagerio-core/src/plan.rs --file crates/eagerio-core/src/staging.rs \
  --test-package eagerio-core --test-package eagerio-tokio --output "$out" \
  -- --tests -- --skip drops_ten_thousand --skip faults_random --skip load_eight --skip real_ || status=$?
# 0: every mutant caught; 2: some missed; 3: some timed out (caught by the time box).
case $status in
  0 | 2 | 3) ;;
  *) echo "cargo mutants failed (exit $status): see $out/mutants.out/log"; exit 1 ;;
esac
python3 - "$out/mutants.out/missed.txt" .ci/mutants-equivalent.txt <<'PY'
import re, sys
missed_path, listed_path = sys.argv[1], sys.argv[2]
def key(line):
    # "crates/x.rs:113:19: replace < with == in f" -> "crates/x.rs: replace < with == in f"
    return re.sub(r"^([^:]+):\d+:\d+:", r"\1:", line.strip())
listed = set()
for line in open(listed_path):
    line = line.split("  #", 1)[0].strip()
    if line and not line.startswith("#"):
        listed.add(line)
missed = [l for l in open(missed_path) if l.strip()]
unexplained = [l.strip() for l in missed if key(l) not in listed]
print(f"{len(missed)} missed mutants, {len(missed) - len(unexplained)} listed as equivalent")
for l in unexplained:
    print(f"UNEXPLAINED {l}")
sys.exit(1 if unexplained else 0)
PY
