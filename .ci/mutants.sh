#!/usr/bin/env bash
# Mutation testing with cargo-mutants. Every mutant must be caught by the tests, time out (an
# infinite loop the tests' time box catches), fail to build, or be listed with its reason in
# .ci/mutants-equivalent.txt.
#
# Two runs, both over the core's tests and the tokio backend's (its conformance suite drives the
# ledgers through real files), in place (the work tree is mutated and restored, mutant by mutant,
# so each build is incremental: 2-7 s instead of a minute):
# - the planner (plan.rs) and the staging pool (staging.rs), whole, every time: about 130
#   mutants, 8-10 minutes on a 2-core machine;
# - the gather ledger (gather.rs) and the sink (sink.rs): about 440 mutants, 75-90 minutes whole,
#   more than CI affords. CI runs one shard of EAGERIO_MUTANTS_SHARDS (default 6, round robin over
#   both files, 12-15 minutes), the shard chosen by the commit count, so any six consecutive
#   commits cover every mutant. EAGERIO_MUTANTS_SHARD=all runs them all (before a release, or
#   after changing those files: the survivors of every shard must be listed).
# Debug impls are not mutated (their output is for people). The 10,000-operation schedules,
# drop storms, load test and real-fault tests are skipped: they take minutes each and reach the
# same code as the conformance suite.
#
# Not yet covered: the io_uring lane (lane.rs); its mutants need the uring tests, about 35 s a
# mutant.
set -euo pipefail
cd "$(dirname "$0")/.."
# Each mutant is one small edit in place: incremental builds make it 2 s instead of 8 s (CI turns
# incremental off for everything else).
export CARGO_INCREMENTAL=1
command -v cargo-mutants >/dev/null || cargo install cargo-mutants --locked --version 27.1.0
shards=${EAGERIO_MUTANTS_SHARDS:-6}
shard=${EAGERIO_MUTANTS_SHARD:-$(($(git rev-list --count HEAD) % shards))}
tests=(--test-package eagerio-core --test-package eagerio-tokio)
skip=(-- --tests -- --skip drops_ten_thousand --skip faults_random --skip load_eight --skip real_)
debug='impl (std::)?fmt::Debug for'
# 0: every mutant caught; 2: some missed; 3: some timed out (caught by the time box).
mutants() {
  local out=$1
  shift
  rm -rf "$out"
  local status=0
  cargo mutants --in-place --no-shuffle -p eagerio-core --exclude-re "$debug" "${tests[@]}" --output "$out" "$@" \
    "${skip[@]}" || status=$?
  case $status in
    0 | 2 | 3) ;;
    *) echo "cargo mutants failed (exit $status): see $out/mutants.out/log"; exit 1 ;;
  esac
}
mutants target/mutants-plan --file crates/eagerio-core/src/plan.rs --file crates/eagerio-core/src/staging.rs
ledgers=(--file crates/eagerio-core/src/gather.rs --file crates/eagerio-core/src/sink.rs)
if [ "$shard" = all ]; then
  echo "gather and sink: every mutant"
  mutants target/mutants-ledgers "${ledgers[@]}"
else
  echo "gather and sink: shard $shard of $shards"
  mutants target/mutants-ledgers "${ledgers[@]}" --shard "$shard/$shards" --sharding round-robin
fi
cat target/mutants-plan/mutants.out/missed.txt target/mutants-ledgers/mutants.out/missed.txt >target/mutants-missed.txt
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
