#!/usr/bin/env python3
"""The installed libraries, as a user of the project gets them.

`meson install --destdir TMP`, then, for the core and each transport built:
a small program compiled and linked against the *installed* shared library
through its pkg-config file (PKG_CONFIG_PATH and PKG_CONFIG_SYSROOT_DIR into
TMP), run, and checked: mcp_version() is the project version, the program
needs libNAME.so.SOVERSION (readelf -d), each library's SONAME is that, a
transport's library needs libmcp.so.SOVERSION (not a private copy of the
core), only mcp_* symbols are exported, and the static libraries and the
headers are installed too.

Usage: test_install.py --build-dir B --version V --soversion S --cc CC...
       [--transport grpc]... [--cflag FLAG]...
"""

import argparse
import glob
import os
import shlex
import subprocess
import sys
import tempfile

PROGRAMS = {
    "libmcp": ("mcp", "mcp/mcp.h", ""),
    "libmcp-grpc": ("mcp_grpc", "mcp/grpc.h", """
  mcp_grpc_options go;
  mcp_grpc_options_default(&go);
  if (go.mode != MCP_GRPC_LISTEN) return 3;"""),
    "libmcp-h2c": ("mcp_h2c", "mcp/h2c.h", """
  mcp_h2c_options ho;
  mcp_h2c_options_default(&ho);
  if (ho.mode != MCP_H2C_LISTEN) return 3;"""),
}

SOURCE = """#include <stdio.h>
#include <string.h>
#include <%(header)s>

int main(void) {
  mcp_store_options so;
  mcp_store_options_default(&so);
  so.epoch = 1;
  mcp_store *store = NULL;
  if (mcp_store_new(&store, &so) != 0) return 2;
  mcp_store_del(store);%(extra)s
  if (strcmp(mcp_strerror(MCP_ERR_IO), "I/O or transport failure") != 0)
    return 4;
  printf("%%s %%06x\\n", mcp_version(), (unsigned)mcp_version_num());
  return 0;
}
"""


def run(argv, env=None, cwd=None):
    p = subprocess.run(argv, env=env, cwd=cwd, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True)
    if p.returncode != 0:
        sys.exit("FAIL: %s exited %d:\n%s" % (shlex.join(argv), p.returncode,
                                             p.stdout))
    return p.stdout


def check(cond, what):
    if not cond:
        sys.exit("FAIL: " + what)
    print("ok:", what)


def dynamic(path):
    """(SONAME or None, [NEEDED]) of an ELF file."""
    soname, needed = None, []
    for line in run(["readelf", "-d", path]).splitlines():
        if "(SONAME)" in line:
            soname = line.split("[", 1)[1].rstrip("]")
        elif "(NEEDED)" in line:
            needed.append(line.split("[", 1)[1].rstrip("]"))
    return soname, needed


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build-dir", required=True)
    ap.add_argument("--version", required=True)
    ap.add_argument("--soversion", required=True)
    ap.add_argument("--cc", required=True, nargs="+")
    ap.add_argument("--transport", action="append", default=[])
    ap.add_argument("--cflag", action="append", default=[])
    a = ap.parse_args()
    major, minor, patch = (int(x) for x in a.version.split("."))
    want = "%s %06x" % (a.version, major << 16 | minor << 8 | patch)

    with tempfile.TemporaryDirectory(prefix="mcp-install-") as tmp:
        dest = os.path.join(tmp, "dest")
        run(["meson", "install", "-C", a.build_dir, "--destdir", dest,
             "--no-rebuild", "--quiet"])
        pcs = glob.glob(os.path.join(dest, "**", "pkgconfig", "libmcp.pc"),
                        recursive=True)
        check(len(pcs) == 1, "one libmcp.pc installed (%s)" % pcs)
        pcdir = os.path.dirname(pcs[0])
        libdir = os.path.dirname(pcdir)
        env = dict(os.environ, PKG_CONFIG_PATH=pcdir,
                   PKG_CONFIG_SYSROOT_DIR=dest,
                   LD_LIBRARY_PATH=libdir)
        core_soname = "libmcp.so." + a.soversion

        for pc in ["libmcp"] + ["libmcp-" + t for t in a.transport]:
            lib, header, extra = PROGRAMS[pc]
            check(os.path.isfile(os.path.join(pcdir, pc + ".pc")),
                  pc + ".pc installed")
            got = run(["pkg-config", "--modversion", pc], env=env).strip()
            check(got == a.version, "%s --modversion %s" % (pc, got))
            flags = shlex.split(run(["pkg-config", "--cflags", "--libs", pc],
                                    env=env))
            check(any(f.startswith("-I" + dest) for f in flags) and
                  any(f.startswith("-L" + dest) for f in flags),
                  "%s points into the installed tree: %s" % (pc, flags))
            soname = "lib%s.so.%s" % (lib, a.soversion)
            real = os.path.join(libdir, "lib%s.so.%s" % (lib, a.version))
            check(os.path.isfile(real), "%s installed" % real)
            check(os.path.isfile(os.path.join(libdir, "lib%s.a" % lib)),
                  "lib%s.a installed too" % lib)
            check(os.path.realpath(os.path.join(libdir, soname)) == real,
                  "%s -> %s" % (soname, os.path.basename(real)))
            got_soname, needed = dynamic(real)
            check(got_soname == soname, "SONAME of lib%s: %s" % (lib,
                                                                  got_soname))
            if lib != "mcp":
                check(core_soname in needed,
                      "lib%s needs %s: %s" % (lib, core_soname, needed))
            exported = [l.split()[-1] for l in
                        run(["nm", "-D", "--defined-only", real]).splitlines()
                        if l.strip()]
            stray = [s for s in exported
                     if not s.startswith("mcp_") and not s.startswith("_")]
            check(exported and not stray,
                  "lib%s exports only mcp_* (%d; stray: %s)" %
                  (lib, len(exported), stray[:5]))
            check(glob.glob(os.path.join(dest, "**", header), recursive=True),
                  header + " installed")

            src = os.path.join(tmp, lib + ".c")
            exe = os.path.join(tmp, lib)
            with open(src, "w") as f:
                f.write(SOURCE % {"header": header, "extra": extra})
            run(a.cc + a.cflag + [src, "-o", exe] + flags, env=env)
            _, needed = dynamic(exe)
            check(soname in needed, "the program needs %s: %s" % (soname,
                                                                   needed))
            out = run([exe], env=env).strip()
            check(out == want, "mcp_version() via %s: %r" % (pc, out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
