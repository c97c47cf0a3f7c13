#!/usr/bin/env python3
"""The names a unity batch could resolve to another file's (CMakeLists.txt builds gf_runner and gf_tests 8 files a
compile): for each batch CMake generated in BUILD, every file-local name (an anonymous namespace's or a file-static
one, per universal-ctags) of one file that a later file of the same batch also writes. A clash of the same signature
is a compile error; one of another signature, or a file-local name that hides what a later file meant (a using-directive's
function, say), is not, and is what this lists for a reader to check. Needs universal-ctags (Debian: universal-ctags).

    python3 tools/unity_clashes.py [BUILD]     # default build/
"""
import collections
import json
import os
import re
import subprocess
import sys

build = sys.argv[1] if len(sys.argv) > 1 else "build"
SKIP = {"TEST", "TEST_F", "TEST_P", "TYPED_TEST", "INSTANTIATE_TEST_SUITE_P", "json", "fs"}


def local_names(path):
    out = subprocess.run(["ctags", "--output-format=json", "--fields=+sSZK", "--c++-kinds=fvsctgep", "--extras=-q",
                          "-o", "-", path], capture_output=True, text=True, check=True).stdout
    names = collections.defaultdict(list)
    for line in out.splitlines():
        t = json.loads(line)
        if t.get("_type") != "tag" or t["name"] in SKIP:
            continue
        inner = t.get("scope", "").split("::")[-1]
        if (t.get("file") or inner.startswith("__anon")) and t.get("scopeKind") in (None, "namespace"):
            names[t["name"]].append((t["kind"], t.get("scope", ""), t.get("signature", "")))
    return names


count = 0
for target in ("gf_runner", "gf_tests"):
    make = os.path.join(build, "CMakeFiles", f"{target}.dir", "build.make")
    if not os.path.exists(make):
        continue
    for unity in sorted(set(re.findall(r"(CMakeFiles/\S+?/Unity/unity_[0-9]+_cxx\.cxx)\.o:", open(make).read()))):
        files = re.findall(r'#include "([^"]+)"', open(os.path.join(build, unity)).read())
        texts = {f: open(f).read() for f in files}
        for i, a in enumerate(files):
            for name, defs in local_names(a).items():
                later = [f for f in files[i + 1:] if re.search(r"\b" + re.escape(name) + r"\b", texts[f])]
                if later:
                    count += 1
                    print(f"{target} {os.path.basename(unity)}: {name} {defs[0]} of {os.path.relpath(a)}; "
                          f"named in {', '.join(os.path.relpath(f) for f in later)}")
print(f"{count} name(s) to check")
