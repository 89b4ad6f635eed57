"""How many of src/interpscale's lines at a revision belong to features requested after issue 34 was
filed (at f912232, 25,977 lines): issues 35 (DCP training state, safetensors export, trackers), 36
(compute multiplier, anneal predictor, reach) and 37 (invariants on user material).

A line counts as such a feature when its module exists only for one (``WHOLE``), or when the commit
that last wrote it (``git blame``) is one of ``FEATURE_COMMITS``: commits that add one of those
features and nothing of issue 34. Commits mixing issue 34 with a feature count as filing-time code.
The feature commits also deleted ``deleted`` lines elsewhere; at most that many of their lines
replace filing-time code, so the filing-time code at the revision is at most
``total - feature + deleted``.

Usage: python scripts/line_account.py [REV]   (default HEAD; run in the repository)
"""

from __future__ import annotations

import subprocess
import sys

FEATURE_COMMITS = """0979f13 1ca2e13 6903fe1 c09fa37 2ca4b72 cd8b167 218d13a 1c6e22d 27886d7 15bef21 e56ad47 e2718cc
48c9737 f8c94ba ae51188 743bded 59b495b 3e71132 1d0f2d8 66eacff e3f3130 79130a5 d298762 b86cf89 69be968 67dabb6
528ce83 1f67870 35162c2 1752db2 3a49335 eee53e4 8604777 12a9e56 3a51ea8 f83ce40 1212107 70eb58c 648d5ba
d8919a5""".split()
WHOLE = ("_commands/export.py", "analysis/figures/multiplier.py", "orchestration/outcome.py", "scaling/anneal_rows.py",
         "scaling/curve.py", "scaling/multiplier.py", "scaling/reach.py", "scaling/trend.py")
PKG = "src/interpscale/"


def git(*args: str) -> str:
    return subprocess.run(["git", *args], check=True, capture_output=True, text=True).stdout


def main(rev: str = "HEAD") -> None:
    feature = {git("rev-parse", h).strip() for h in FEATURE_COMMITS}
    whole = {PKG + w for w in WHOLE}
    total = in_whole = inline = 0
    for path in git("ls-tree", "-r", "--name-only", rev, PKG).split():
        if not path.endswith(".py"):
            continue
        shas = [line.split()[0] for line in git("blame", "--porcelain", rev, "--", path).splitlines()
                if line[:1] not in ("\t", "") and len(line.split()[0]) == 40 and len(line.split()) in (3, 4)]
        total += len(shas)
        if path in whole:
            in_whole += len(shas)
        else:
            inline += sum(s in feature for s in shas)
    deleted = 0
    for h in FEATURE_COMMITS:
        for row in git("diff", "--numstat", f"{h}^", h, "--", PKG).splitlines():
            removed, path = row.split("\t")[1], row.split("\t")[2]
            deleted += 0 if path in whole or removed == "-" else int(removed)
    print(f"{rev}: {total} lines; feature modules {in_whole}; lines last written by feature commits {inline}; "
          f"lines those commits deleted elsewhere {deleted}")
    print(f"filing-time code at {rev}: at most {total - in_whole - inline + deleted} lines (target < 25,977)")


if __name__ == "__main__":
    main(*sys.argv[1:2])
