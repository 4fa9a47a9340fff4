#!/usr/bin/env python3
"""The lines a change really changed, as a diff that `cargo mutants --in-diff` reads.

Usage: changed_lines.py BASE FILE_GLOB... > changed.diff

Reads `git diff -M -C -U0 BASE` (the work tree against BASE, renames and copies detected) and
writes, for each file matching one of FILE_GLOBs, a diff of insertion hunks that holds only the
lines the change wrote or rewrote, each with its text from the work tree:

- a line added in the change is kept, unless it was *moved*: it sits in a run of at least
  MOVED_RUN non-blank lines that also appears, line for line (leading and trailing spaces
  ignored), among the lines the same change removed, in any file. Splitting a file into
  modules moves hundreds of lines and rewrites a few (imports, visibility, module docs): only
  those few are mutated again, not the moved code, which the last run already tested;
- a deletion that is not a move marks the lines on either side of it, as cargo-mutants does,
  so removing a check still tests the code around it;
- a file renamed or copied whole (git's -M -C) adds nothing but its edits.

cargo-mutants checks that every line of the diff matches the tree, and it does: each line is
copied from the file as it is now. Prints a summary to stderr.
"""

import fnmatch
import re
import subprocess
import sys

MOVED_RUN = 3
HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


def norm(line):
    return line.strip()


def parse(diff_text):
    """Yields (path, hunks); a hunk is (new_start, new_count, removed_lines, added_lines)."""
    path, hunks, hunk = None, [], None
    for line in diff_text.split("\n"):
        if line.startswith("diff --git "):
            if path is not None:
                yield path, hunks
            path, hunks, hunk = None, [], None
        elif line.startswith("+++ "):
            target = line[4:]
            path = target[2:] if target.startswith("b/") else None  # /dev/null: deleted
        elif line.startswith("--- "):
            pass
        elif line.startswith("@@"):
            m = HUNK.match(line)
            new_start = int(m.group(3))
            new_count = 1 if m.group(4) is None else int(m.group(4))
            hunk = (new_start, new_count, [], [])
            hunks.append(hunk)
        elif hunk is not None and line.startswith("-"):
            hunk[2].append(line[1:])
        elif hunk is not None and line.startswith("+"):
            hunk[3].append(line[1:])
    if path is not None:
        yield path, hunks


def windows(lines):
    """The MOVED_RUN-line windows of the non-blank lines of one run, as (indexes, key)."""
    body = [(i, norm(l)) for i, l in enumerate(lines) if norm(l)]
    for k in range(len(body) - MOVED_RUN + 1):
        chunk = body[k : k + MOVED_RUN]
        yield [i for i, _ in chunk], tuple(t for _, t in chunk)


def main():
    base, globs = sys.argv[1], sys.argv[2:]
    diff = subprocess.run(
        ["git", "diff", "-M", "-C", "-U0", "--no-color", "--no-ext-diff", base],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    files = list(parse(diff))
    removed = set()
    for _, hunks in files:
        for _, _, minus, _ in hunks:
            removed.update(key for _, key in windows(minus))
    # A removed line is a move's source when a window of it appears among the added lines.
    added = set()
    for _, hunks in files:
        for _, _, _, plus in hunks:
            added.update(key for _, key in windows(plus))

    out, kept_total, moved_total = [], 0, 0
    for path, hunks in files:
        if path is None or not any(fnmatch.fnmatch(path, g) for g in globs):
            continue
        with open(path) as f:
            text = f.read().splitlines()
        marked = set()
        for new_start, new_count, minus, plus in hunks:
            moved = set()
            for idx, key in windows(plus):
                if key in removed:
                    moved.update(idx)
            for i, line in enumerate(plus):
                if not norm(line):
                    continue
                if i in moved:
                    moved_total += 1
                else:
                    marked.add(new_start + i)
            moved_out = set()
            for idx, key in windows(minus):
                if key in added:
                    moved_out.update(idx)
            if any(norm(l) and i not in moved_out for i, l in enumerate(minus)):
                # With -U0, a pure deletion's hunk starts at the line before the gap: mark both
                # sides of it. A replacement's starts at its first new line.
                marked.add(new_start)
                if new_count == 0:
                    marked.add(new_start + 1)
        marked = sorted(n for n in marked if 1 <= n <= len(text))
        if not marked:
            continue
        kept_total += len(marked)
        out.append(f"diff --git a/{path} b/{path}\n--- a/{path}\n+++ b/{path}\n")
        run = [marked[0]]
        for n in marked[1:] + [None]:
            if n is not None and n == run[-1] + 1:
                run.append(n)
                continue
            out.append(f"@@ -{run[0] - 1},0 +{run[0]},{len(run)} @@\n")
            out.extend(f"+{text[k - 1]}\n" for k in run)
            if n is not None:
                run = [n]
    sys.stdout.write("".join(out))
    print(
        f"changed_lines: {kept_total} lines changed in the mutated files since {base} "
        f"({moved_total} moved lines left out)",
        file=sys.stderr,
    )


if __name__ == "__main__":
    main()
