#!/usr/bin/env python3
"""Writes docs/mutants.md from a whole-file sweep (`bash .ci/mutants.sh all`).

Usage: mutants_report.py TIMES_FILE JUDGE_STATUS OUT_DIR...

TIMES_FILE holds "GROUP SECONDS" lines; each OUT_DIR is a cargo-mutants --output directory whose
mutants.out/{caught,missed,timeout,unviable}.txt list one mutant a line, "file:line:col: name".
"""

import collections
import datetime
import os
import subprocess
import sys

OUTCOMES = ("caught", "missed", "timeout", "unviable")


def main():
    times_path, status, dirs = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
    counts = collections.defaultdict(collections.Counter)
    missed = []
    for d in dirs:
        for outcome in OUTCOMES:
            path = os.path.join(d, "mutants.out", f"{outcome}.txt")
            if not os.path.exists(path):
                continue
            for line in open(path):
                line = line.strip()
                if not line:
                    continue
                counts[line.split(":", 1)[0]][outcome] += 1
                if outcome == "missed":
                    missed.append(line)
    times = [line.split() for line in open(times_path) if line.strip()]
    commit = subprocess.run(
        ["git", "describe", "--always", "--dirty"], capture_output=True, text=True, check=True
    ).stdout.strip()
    lines = [
        "# Mutation testing: the last whole-file sweep",
        "",
        "CI mutates only the lines a change wrote (`bash .ci/mutants.sh`, see its header). A sweep",
        "mutates every line of the planner, staging pool, gather, sink and io_uring lane. Run one",
        "before a release and after reshaping one of those files: `bash .ci/mutants.sh all`, or",
        "`bash .ci/mutants.sh all FILE...` for some of them. It rewrites this page.",
        "",
        f"- date: {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC",
        f"- commit: {commit}",
        "- time: " + ", ".join(f"{g} {int(s) // 60} min" for g, s in times),
        "- verdict: "
        + ("every missed mutant is listed in `.ci/mutants-equivalent.txt`" if status == 0
           else "some missed mutants are not listed as equivalent (below)"),
        "",
        "Only the files in the table were swept in this run (`all FILE...` sweeps some of them).",
        "",
        "| file | caught | missed | timeouts | unviable |",
        "|---|---:|---:|---:|---:|",
    ]
    for path in sorted(counts):
        c = counts[path]
        lines.append(f"| `{path}` | {c['caught']} | {c['missed']} | {c['timeout']} | {c['unviable']} |")
    lines += ["", "Missed (each is in `.ci/mutants-equivalent.txt` with its reason, or a test is owed):", ""]
    lines += [f"- `{m}`" for m in missed] or ["- none"]
    os.makedirs("docs", exist_ok=True)
    with open("docs/mutants.md", "w") as f:
        f.write("\n".join(lines) + "\n")
    print("wrote docs/mutants.md")


if __name__ == "__main__":
    main()
