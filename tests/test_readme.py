#!/usr/bin/env python3
"""The README's embedding examples compile against the public header.

Both C blocks of README.md (the source loop, the sink loop) are compiled
with the project's warnings, with stubs for the application's functions
they call (now(), send_grpc_message(), ...). And the set-up section shows
what a user needs: the system install with ldconfig and the staged one
with its pkg-config variables (issue 24 item 12), the pkg-config names
installed, and what mcp_store_upsert() returns.

Usage: test_readme.py --source-root DIR --cc CC...
"""

import argparse
import os
import re
import subprocess
import sys
import tempfile

STUBS = """#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <mcp/mcp.h>
static int my_config_valid(const mcp_resource *r) { return r != NULL; }
static void my_config_apply(const mcp_change *c) { (void)c; }
static mcp_tstamp now(void) { return 1; }
static void end_stream(int code, const char *msg) { (void)code; (void)msg; }
static void send_grpc_message(const mcp_iovec *v, size_t n, size_t len) {
  (void)v; (void)n; (void)len;
}
static void my_random_bytes(uint8_t *d, size_t n, void *ud) {
  (void)ud;
  for (size_t i = 0; i < n; i++) d[i] = (uint8_t)i;
}
"""


def check(cond, what):
    if not cond:
        sys.exit("FAIL: " + what)
    print("ok:", what)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--source-root", required=True)
    ap.add_argument("--cc", required=True, nargs="+")
    a = ap.parse_args()
    with open(os.path.join(a.source_root, "README.md")) as f:
        text = f.read()
    for needle in ("meson install", "pkg-config --cflags --libs libmcp-h2c)",
                   "`libmcp`", "`libmcp-grpc`", "`libmcp-h2c`",
                   "`libmcp-schema`", "`libmcp-schema-istio`",
                   "--variable=descriptor_set libmcp-schema-istio",
                   "mcp_sink_session_next", "mcp_version()"):
        check(needle in text, "README shows %s" % needle)
    # Issue 24 item 12: both installs. System-wide, ldconfig right after
    # (else the program cannot load libmcp_h2c.so.4); staged, the pkg-config
    # variables and LD_LIBRARY_PATH (test_install.py runs that block).
    check(re.search(r"^    sudo meson install -C build-release\n"
                    r"    sudo ldconfig\n", text, re.M),
          "README shows the system install followed by ldconfig")
    check(re.search(r"^    meson install -C build-release --destdir .*\n"
                    r"(    .*\n)*    export .*PKG_CONFIG_PATH=.*"
                    r"PKG_CONFIG_SYSROOT_DIR=.*\n(    .*\n)*"
                    r"    LD_LIBRARY_PATH=\S+ \./app\n", text, re.M),
          "README shows the staged install with PKG_CONFIG_PATH, "
          "PKG_CONFIG_SYSROOT_DIR and LD_LIBRARY_PATH")
    check(re.search(r"int rv = mcp_store_upsert\(", text) and
          re.search(r"1: the collection changed", text),
          "README shows mcp_store_upsert()'s return value")

    blocks = re.findall(r"```c\n(.*?)```", text, re.S)
    check(len(blocks) == 2, "two C examples (source, sink): %d" % len(blocks))
    source, sink = blocks
    # The sink example starts with the apply callback: file scope.
    cut = sink.index("static const char *const colls")
    prog = (STUBS + sink[:cut] + "\nint main(void) {\n"
            "  const uint8_t *in = (const uint8_t *)\"\";\n"
            "  size_t inlen = 0;\n"
            "  const uint8_t *spec_bytes = in;\n"
            "  size_t spec_len = 0;\n"
            "  {\n" + source.replace("#include <mcp/mcp.h>\n", "") + "  }\n"
            "  {\n" + sink[cut:] + "  }\n"
            "  return 0;\n}\n")
    with tempfile.TemporaryDirectory(prefix="mcp-readme-") as tmp:
        src = os.path.join(tmp, "readme.c")
        with open(src, "w") as f:
            f.write(prog)
        argv = a.cc + ["-std=c11", "-Wall", "-Wextra", "-Werror",
                       "-Wno-unused-variable", "-Wno-unused-function",
                       "-Wno-unused-parameter",
                       ] + ["-I" + os.path.join(a.source_root, "core", *d)
                            for d in (("include",), ("engine", "include"),
                                      ("mcp", "include"),
                                      ("destination", "include"),
                                      ("dispatcher", "include"),
                                      ("xds", "include"))] + [
                       "-c", src, "-o", os.path.join(tmp, "readme.o")]
        p = subprocess.run(argv, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
        check(p.returncode == 0,
              "the README's examples compile\n%s\n%s" % (p.stdout, prog))
    return 0


if __name__ == "__main__":
    sys.exit(main())
