#!/usr/bin/env bash
# Mutation testing with cargo-mutants. Every mutant must be caught by the tests, time out (an
# infinite loop the tests' time box catches), fail to build, or be listed with its reason in
# .ci/mutants-equivalent.txt.
#
#   bash .ci/mutants.sh                 the change (what CI runs): the mutants in lines changed
#                                       since the last commit that passed CI, within a time budget
#   bash .ci/mutants.sh all [FILE...]   a whole-file sweep of every mutated file (or of the
#                                       given ones); writes its result to docs/mutants.md
#
# The mutated files and the tests that must catch their mutants come in two groups:
# - core: the planner, the staging pool, the gather ledger and future, the sink, over the core's
#   tests and the tokio backend's (its conformance suite drives the ledgers through real files):
#   about 8 s a mutant;
# - lane: the io_uring lane, over the uring crate's unit tests, its turn-by-turn lane tests
#   (lane_core), the conformance suite on the shared driver and on two lanes, the fault tests
#   and the sink completion tests: about 13 s a mutant.
# Debug impls are not mutated (their output is for people). The 10,000-operation schedules,
# drop storms, load test and real-fault tests are skipped, and so are the uring suite on
# unregistered staging and on the tokio fallback and its 4 GiB write: they take minutes each
# and reach the same code as the tests that run.
#
# The change. Its base is the commit in .ci/passed (the last one whose CI passed: a session sets
# it to the main it starts from), or EAGERIO_MUTANTS_BASE; when that is not an ancestor of HEAD,
# the previous commit. .ci/changed_lines.py turns `git diff -M -C` into the lines the change
# wrote, leaving out lines it only moved (a file split into modules is mutated only where it was
# edited). A change that touches no mutated file builds nothing here. When the change has more
# mutants than EAGERIO_MUTANTS_BUDGET seconds (default 1200) afford at the rates above, one shard
# of them runs, chosen by the commit count, and the log says so; a hard cap of twice the budget
# stops cargo-mutants whatever happens, so CI stays inside its limit.
#
# Each mutant is one small edit in place: incremental builds make it 2-7 s instead of a minute. A
# mutant whose tests run past 3x the unmutated tests' time is a hang (TIMEOUT, caught): the default
# 5x made each of them cost about 70 s.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_INCREMENTAL=1
# The proptests and the conformance suite draw the same cases for every mutant and every run, so
# a mutant is caught always or never: with fresh seeds, a mutant the random cases caught only
# sometimes failed CI once (sort_requests' run check, since covered by a test of its own).
export PROPTEST_RNG_SEED=${PROPTEST_RNG_SEED:-20261205} EAGERIO_SEED=${EAGERIO_SEED:-20261205}

core_files=(crates/eagerio-core/src/plan.rs crates/eagerio-core/src/staging.rs
  'crates/eagerio-core/src/gather.rs' 'crates/eagerio-core/src/gather/*.rs' crates/eagerio-core/src/sink.rs)
core_packages=(-p eagerio-core --test-package eagerio-core --test-package eagerio-tokio)
core_tests=(-- --tests -- --skip drops_ten_thousand --skip faults_random --skip load_eight --skip real_)
lane_files=(crates/eagerio-uring/src/lane.rs)
lane_packages=(-p eagerio-uring --test-package eagerio-uring)
lane_tests=(-- --lib --test lane_core --test conformance --test faults --test sink_completion --test reliability_lane
  -- --skip ten_thousand --skip over_4_gib --skip unregistered:: --skip tokio_fallback::)
groups=(core lane)
declare -A rate=([core]=8 [lane]=13)
debug='impl (std::)?fmt::Debug for'
mode=${1:-change}
[ $# -gt 0 ] && shift
sweep_globs=("$@")

files_of() { local -n f="$1_files"; printf '%s\n' "${f[@]}"; }
packages_of() { local -n p="$1_packages"; printf '%s\n' "${p[@]}"; }
tests_of() { local -n t="$1_tests"; printf '%s\n' "${t[@]}"; }
# The --file arguments of a group's files (or of the given ones).
file_args() { local f; for f in "$@"; do printf '%s\n' --file "$f"; done; }

ensure_cargo_mutants() {
  command -v cargo-mutants >/dev/null || cargo install cargo-mutants --locked --version 27.1.0
}

# Runs cargo-mutants for one group. Usage: run GROUP OUT_DIR CAP_SECONDS ARGS... (--file etc.)
# 0: every mutant caught; 2: some missed; 3: some timed out (caught by the time box).
run() {
  local group=$1 out=$2 cap=$3
  shift 3
  local packages=() tests=()
  mapfile -t packages < <(packages_of "$group")
  mapfile -t tests < <(tests_of "$group")
  rm -rf "$out"
  local status=0
  timeout --signal=INT --kill-after=60 "$cap" \
    cargo mutants --in-place --no-shuffle --timeout-multiplier 3 --exclude-re "$debug" --output "$out" "$@" \
      "${packages[@]}" "${tests[@]}" ||
    status=$?
  case $status in
    0 | 2 | 3) ;;
    124 | 130 | 137)
      echo "!!! the time cap (${cap} s) stopped cargo-mutants: the mutants it reached are judged below"
      restore_tree
      ;;
    *)
      echo "cargo mutants failed (exit $status): see $out/mutants.out/log"
      exit 1
      ;;
  esac
}

# cargo-mutants restores each file after its mutant; a run stopped by the cap may leave one
# mutated. Those files carry its marker; CI's fresh clone takes them back from git.
restore_tree() {
  local left
  left=$(grep -rl -- '~ changed by cargo-mutants ~' crates || true)
  [ -z "$left" ] && return 0
  if [ "${CI:-}" = true ]; then
    echo "restoring from git: $left"
    # shellcheck disable=SC2086
    git checkout -- $left
  else
    echo "!!! files left mutated (restore them by hand): $left"
    exit 1
  fi
}

# Judges the missed mutants of the given output dirs against .ci/mutants-equivalent.txt.
judge() {
  local dirs=("$@") missed=target/mutants-missed.txt
  : >"$missed"
  for d in "${dirs[@]}"; do
    [ -f "$d/mutants.out/missed.txt" ] && cat "$d/mutants.out/missed.txt" >>"$missed"
  done
  python3 - "$missed" .ci/mutants-equivalent.txt <<'PY'
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
}

mkdir -p target
if [ "$mode" = change ]; then
  base=${EAGERIO_MUTANTS_BASE:-$(sed -n 's/^\([0-9a-f]\{7,40\}\).*/\1/p' .ci/passed 2>/dev/null | head -1)}
  if [ -z "$base" ] || ! git merge-base --is-ancestor "$base" HEAD 2>/dev/null; then
    echo "no recorded base that HEAD descends from (.ci/passed: ${base:-none}): the previous commit"
    base=$(git rev-parse HEAD~1)
  fi
  echo "the change: $(git rev-parse --short "$base")..HEAD, $(git rev-list --count "$base"..HEAD) commits, and the work tree"
  budget=${EAGERIO_MUTANTS_BUDGET:-1200}
  declare -A diff count
  total_cost=0
  for g in "${groups[@]}"; do
    diff[$g]=target/mutants-$g.diff
    mapfile -t globs < <(files_of "$g")
    python3 .ci/changed_lines.py "$base" "${globs[@]}" >"${diff[$g]}"
    count[$g]=0
    if [ -s "${diff[$g]}" ]; then
      ensure_cargo_mutants
      mapfile -t packages < <(packages_of "$g")
      mapfile -t files < <(file_args "${globs[@]}")
      count[$g]=$(cargo mutants --list --in-diff "${diff[$g]}" --exclude-re "$debug" "${files[@]}" "${packages[@]}" |
        grep -c . || true)
    fi
    echo "$g: ${count[$g]} mutants in changed lines"
    total_cost=$((total_cost + count[$g] * rate[$g]))
  done
  if [ "$total_cost" -eq 0 ]; then
    echo "no mutant in a changed line: nothing to build"
    exit 0
  fi
  shards=$(((total_cost + budget - 1) / budget))
  sharding=()
  if [ "$shards" -gt 1 ]; then
    shard=$(($(git rev-list --count HEAD) % shards))
    sharding=(--shard "$shard/$shards" --sharding round-robin)
    echo "!!! about ${total_cost} s of mutants, over the ${budget} s budget: shard ${shard} of ${shards} runs;" \
      "the rest wait for a sweep (bash .ci/mutants.sh all)"
  fi
  dirs=()
  for g in "${groups[@]}"; do
    [ "${count[$g]}" -gt 0 ] || continue
    mapfile -t files < <(file_args $(files_of "$g"))
    run "$g" "target/mutants-$g" $((2 * budget)) --in-diff "${diff[$g]}" "${files[@]}" "${sharding[@]}"
    dirs+=("target/mutants-$g")
  done
  judge "${dirs[@]}"
elif [ "$mode" = all ]; then
  ensure_cargo_mutants
  dirs=()
  report=target/mutants-sweep.txt
  : >"$report"
  for g in "${groups[@]}"; do
    # Every file of the group, or the given files that belong to it (by their crate).
    mapfile -t picked < <(files_of "$g")
    if [ ${#sweep_globs[@]} -gt 0 ]; then
      crate=$(dirname "$(dirname "${picked[0]}")")
      picked=()
      for s in "${sweep_globs[@]}"; do [[ $s == "$crate"/* ]] && picked+=("$s"); done
    fi
    [ ${#picked[@]} -gt 0 ] || continue
    mapfile -t files < <(file_args "${picked[@]}")
    start=$(date +%s)
    run "$g" "target/mutants-$g" 86400 "${files[@]}"
    echo "$g $(($(date +%s) - start))" >>"$report"
    dirs+=("target/mutants-$g")
  done
  status=0
  judge "${dirs[@]}" || status=$?
  python3 .ci/mutants_report.py "$report" "$status" "${dirs[@]}"
  exit $status
else
  echo "usage: bash .ci/mutants.sh [all [FILE...]]" >&2
  exit 2
fi
