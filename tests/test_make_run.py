#!/usr/bin/env python3
"""`make run` needs neither npm nor the tests.

What `make run` would do (make -n, with npm and node hidden from PATH):
install the `run` set of Debian packages, configure a build directory with
-Dtests=false, build and serve; never npm. The `run` package set holds no
Node.js, no test framework; the `test` set does. And a build configured as
`make run` configures it has the programs and no test target.

Usage: test_make_run.py --source-root DIR
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile


def run(argv, **kw):
    p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True, **kw)
    if p.returncode != 0:
        sys.exit("FAIL: %s exited %d:\n%s" % (" ".join(argv), p.returncode,
                                             p.stdout))
    return p.stdout


def check(cond, what):
    if not cond:
        sys.exit("FAIL: " + what)
    print("ok:", what)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--source-root", required=True)
    a = ap.parse_args()
    root = a.source_root
    with tempfile.TemporaryDirectory(prefix="mcp-make-run-") as tmp:
        # A PATH without npm and node: make -n must not need them either.
        bindir = os.path.join(tmp, "bin")
        os.mkdir(bindir)
        for tool in ("make", "meson", "ninja", "bash", "env", "sh"):
            path = shutil.which(tool)
            if path:
                os.symlink(path, os.path.join(bindir, tool))
        env = dict(os.environ, PATH=bindir)
        build = os.path.join(tmp, "run-build")
        plan = run(["make", "-n", "-C", root, "run", "RUN_BUILD=" + build],
                   env=env)
        print(plan)
        check("npm" not in plan and "node_modules" not in plan,
              "make run runs no npm")
        check("scripts/install-deps.sh run" in plan,
              "make run installs the run package set")
        check("-Dtests=false" in plan, "make run configures -Dtests=false")
        check("meson test" not in plan, "make run runs no test")

        runset = run([os.path.join(root, "scripts", "install-deps.sh"),
                      "run", "--list"]).split()
        testset = run([os.path.join(root, "scripts", "install-deps.sh"),
                       "test", "--list"]).split()
        for p in ("nodejs", "npm", "check", "clang", "valgrind"):
            check(p not in runset and p in testset,
                  "%s only in the test set" % p)
        check(set(runset) <= set(testset), "the run set is in the test set")

        # The build directory make run makes: programs, no tests.
        run(["meson", "setup", build, "-Dtests=false"], cwd=root)
        targets = run(["ninja", "-C", build, "-t", "targets", "all"])
        names = [l.split(":")[0] for l in targets.splitlines()]
        check(any(n.endswith("tools/mcp-source") for n in names) and
              any(n.endswith("tools/mcp-sink") for n in names),
              "the programs are built")
        tests = [n for n in names if os.path.basename(n).startswith("test_")]
        check(not tests, "no test is built (%s)" % tests[:5])
    return 0


if __name__ == "__main__":
    sys.exit(main())
