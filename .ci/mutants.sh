#!/usr/bin/env bash
# Mutation testing with cargo-mutants. Every mutant must be caught by the tests, time out (an
# infinite loop the tests' time box catches), fail to build, or be listed with its reason in
# .ci/mutants-equivalent.txt.
#
# Three runs, in place (the work tree is mutated and restored, mutant by mutant, so each build
# is incremental: 2-7 s instead of a minute):
# - the planner (plan.rs) and the staging pool (staging.rs), whole, every time: about 130
#   mutants, 8-10 minutes on a 2-core machine, over the core's tests and the tokio backend's
#   (its conformance suite drives the ledgers through real files);
# - the gather ledger (gather.rs) and the sink (sink.rs), over the same tests: about 440
#   mutants, 75-90 minutes whole, more than CI affords;
# - the io_uring lane (lane.rs): about 200 mutants over the uring crate's unit tests, its
#   turn-by-turn lane tests (lane_core), the conformance suite on the shared driver and on two
#   lanes, the fault tests and the sink completion tests: about 13 s a mutant, 45 minutes whole.
# CI runs one shard of EAGERIO_MUTANTS_SHARDS (default 6, round robin) of the last two, the shard
# chosen by the commit count, so any six consecutive commits cover every mutant.
# EAGERIO_MUTANTS_SHARD=all runs them all (before a release, or after changing those files: the
# survivors of every shard must be listed).
# Debug impls are not mutated (their output is for people). The 10,000-operation schedules,
# drop storms, load test and real-fault tests are skipped, and so are the uring suite on
# unregistered staging and on the tokio fallback and its 4 GiB write: they take minutes each
# and reach the same code as the tests that run.
set -euo pipefail
cd "$(dirname "$0")/.."
# Each mutant is one small edit in place: incremental builds make it 2 s instead of 8 s (CI turns
# incremental off for everything else).
export CARGO_INCREMENTAL=1
# The proptests and the conformance suite draw the same cases for every mutant and every run, so
# a mutant is caught always or never: with fresh seeds, a mutant the random cases caught only
# sometimes failed CI once (sort_requests' run check, since covered by a test of its own).
export PROPTEST_RNG_SEED=${PROPTEST_RNG_SEED:-20261205} EAGERIO_SEED=${EAGERIO_SEED:-20261205}
command -v cargo-mutants >/dev/null || cargo install cargo-mutants --locked --version 27.1.0
shards=${EAGERIO_MUTANTS_SHARDS:-6}
shard=${EAGERIO_MUTANTS_SHARD:-$(($(git rev-list --count HEAD) % shards))}
core=(-p eagerio-core --test-package eagerio-core --test-package eagerio-tokio
  -- --tests -- --skip drops_ten_thousand --skip faults_random --skip load_eight --skip real_)
lane=(-p eagerio-uring --test-package eagerio-uring
  -- --lib --test lane_core --test conformance --test faults --test sink_completion --test reliability_lane
  -- --skip ten_thousand --skip over_4_gib --skip unregistered:: --skip tokio_fallback::)
debug='impl (std::)?fmt::Debug for'
if [ "$shard" = all ]; then sharding=(); else sharding=(--shard "$shard/$shards" --sharding round-robin); fi
# 0: every mutant caught; 2: some missed; 3: some timed out (caught by the time box).
# Usage: mutants OUT_DIR FILE... -- PACKAGE_AND_TEST_ARGS...
mutants() {
  local out=$1
  shift
  local files=()
  while [ "$1" != -- ]; do files+=(--file "$1"); shift; done
  shift
  rm -rf "$out"
  local status=0
  cargo mutants --in-place --no-shuffle --exclude-re "$debug" "${files[@]}" --output "$out" "$@" || status=$?
  case $status in
    0 | 2 | 3) ;;
    *) echo "cargo mutants failed (exit $status): see $out/mutants.out/log"; exit 1 ;;
  esac
}
mutants target/mutants-plan crates/eagerio-core/src/plan.rs crates/eagerio-core/src/staging.rs -- "${core[@]}"
echo "gather and sink, then the io_uring lane: shard ${shard} of ${shards}"
mutants target/mutants-ledgers crates/eagerio-core/src/gather.rs crates/eagerio-core/src/sink.rs -- \
  "${sharding[@]}" "${core[@]}"
mutants target/mutants-lane crates/eagerio-uring/src/lane.rs -- "${sharding[@]}" "${lane[@]}"
cat target/mutants-{plan,ledgers,lane}/mutants.out/missed.txt >target/mutants-missed.txt
python3 - target/mutants-missed.txt .ci/mutants-equivalent.txt <<'PY'
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
