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

Issue 24 item 12: libmcp-schema-istio (Istio's types built in) is installed
with its header, its pkg-config file and Istio's descriptor set (the path
`pkg-config --variable=descriptor_set` gives): a program built against it
encodes a VirtualService and its built-in set is the installed file's
bytes, which the installed mcp-schema-conv reads. And README.md's staged
install is run exactly as written (a shell script of its lines, with only
the build directory and the compiler put in), in a fresh directory: its
program must build and run.

Usage: test_install.py --build-dir B --version V --soversion S
       --source-root DIR --cc CC... [--transport grpc]... [--cflag FLAG]...
"""

import argparse
import glob
import json
import os
import re
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


def declared_extern(dest):
    """The functions the shared libraries' installed headers declare
    MCP_EXTERN: each must be exported (a source file that does not see its declaration compiles it
    hidden)."""
    names = []
    for h in glob.glob(os.path.join(dest, "**", "mcp", "*.h"),
                       recursive=True):
        if os.path.basename(h).startswith("schema"):
            continue  # libmcp-schema*: static libraries only
        text = re.sub(r"/\*.*?\*/", " ", open(h).read(), flags=re.S)
        names += re.findall(r"MCP_EXTERN[^;{(]*?\b(mcp_\w+)\s*\(", text)
    return names


SCHEMA_SOURCE = """#include <stdio.h>
#include <string.h>
#include <mcp/schema_istio.h>

static const char yaml[] =
    "apiVersion: networking.istio.io/v1alpha3\\n"
    "kind: VirtualService\\n"
    "metadata: {name: reviews, namespace: default}\\n"
    "spec:\\n"
    "  hosts: [reviews]\\n"
    "  http:\\n"
    "  - route:\\n"
    "    - destination: {host: reviews, subset: v2}\\n"
    "      weight: 100\\n";

/* Encodes the VirtualService's spec by Istio's type (from the kinds
 * table), prints it back as JSON, and writes the built-in descriptor set
 * to argv[1]. */
int main(int argc, char **argv) {
  mcp_schema *s = NULL;
  mcp_schema_error err;
  if (argc != 2 || mcp_schema_new(&s, NULL) != 0) return 2;
  if (mcp_schema_add_istio(s, &err) != 0) {
    fprintf(stderr, "%s\\n", err.message);
    return 3;
  }
  size_t nk;
  const mcp_schema_istio_kind *k = mcp_schema_istio_kinds(&nk);
  const char *type = NULL;
  for (size_t i = 0; i < nk; i++)
    if (!strcmp(k[i].kind, "VirtualService")) type = k[i].message;
  mcp_schema_docs *docs = NULL;
  uint8_t *bytes = NULL;
  char *json = NULL;
  size_t n = 0, jl = 0, pl = 0;
  if (!type || mcp_schema_parse_yaml(NULL, yaml, sizeof yaml - 1, &docs, &err) ||
      mcp_schema_encode(s, type,
                        mcp_schema_value_get(mcp_schema_docs_root(docs, 0), "spec"),
                        "spec", 0, &bytes, &n, &err) ||
      mcp_schema_to_json(s, type, bytes, n, 0, &json, &jl, &err)) {
    fprintf(stderr, "%s: %s\\n", type ? type : "no VirtualService", err.message);
    return 4;
  }
  printf("%s %s\\n", type, json);
  const uint8_t *pb = mcp_schema_istio_descriptor_set(&pl);
  FILE *f = fopen(argv[1], "wb");
  if (!f || fwrite(pb, 1, pl, f) != pl || fclose(f) != 0) return 5;
  mcp_schema_free_bytes(s, json);
  mcp_schema_free_bytes(s, bytes);
  mcp_schema_docs_free(docs);
  mcp_schema_free(s);
  return 0;
}
"""

VS_SPEC = {"hosts": ["reviews"],
           "http": [{"route": [{"destination": {"host": "reviews",
                                                "subset": "v2"},
                                "weight": 100}]}]}


def check_schema_istio(a, tmp, dest, pcdir, libdir, env):
    """libmcp-schema-istio and Istio's descriptor set, installed and used."""
    pc = "libmcp-schema-istio"
    check(os.path.isfile(os.path.join(pcdir, pc + ".pc")), pc + ".pc installed")
    check(os.path.isfile(os.path.join(libdir, "libmcp-schema-istio.a")),
          "libmcp-schema-istio.a installed")
    check(glob.glob(os.path.join(dest, "**", "mcp", "schema_istio.h"),
                    recursive=True), "mcp/schema_istio.h installed")
    got = run(["pkg-config", "--modversion", pc], env=env).strip()
    check(got == a.version, "%s --modversion %s" % (pc, got))
    # The sysroot is put in front of a variable's path too (pkgconf).
    pb = run(["pkg-config", "--variable=descriptor_set", pc], env=env).strip()
    check(pb.startswith(dest + os.sep) and os.path.isfile(pb),
          "the descriptor set is where %s says: %s" % (pc, pb))
    flags = shlex.split(run(["pkg-config", "--cflags", "--libs", pc], env=env))
    src = os.path.join(tmp, "schema_istio.c")
    exe = os.path.join(tmp, "schema_istio")
    with open(src, "w") as f:
        f.write(SCHEMA_SOURCE)
    run(a.cc + a.cflag + [src, "-o", exe] + flags, env=env)
    built_in = os.path.join(tmp, "built-in.pb")
    out = run([exe, built_in], env=env).strip()
    typ, _, body = out.partition(" ")
    check(typ == "istio.networking.v1alpha3.VirtualService" and
          json.loads(body) == VS_SPEC,
          "a program built against %s encodes a VirtualService: %s" % (pc, out))
    with open(built_in, "rb") as f, open(pb, "rb") as g:
        check(f.read() == g.read(),
              "the installed descriptor set is the built-in one")
    # The installed mcp-schema-conv reads it (its documented use).
    conv = glob.glob(os.path.join(dest, "**", "bin", "mcp-schema-conv"),
                     recursive=True)
    check(len(conv) == 1, "mcp-schema-conv installed")
    vs = os.path.join(tmp, "vs.yaml")
    with open(vs, "w") as f:
        f.write("spec:\n  hosts: [reviews]\n  http:\n  - route:\n"
                "    - destination: {host: reviews, subset: v2}\n"
                "      weight: 100\n")
    wire = os.path.join(tmp, "vs.pb")
    run([conv[0], "encode", "--select", "spec", "-d", pb, typ, vs, wire])
    back = run([conv[0], "decode", "-d", pb, typ, wire]).strip()
    check(json.loads(back) == VS_SPEC,
          "mcp-schema-conv -d <installed set> encodes and decodes: %s" % back)


def readme_staged_block(root):
    """README.md's staged install: the indented block with --destdir."""
    with open(os.path.join(root, "README.md")) as f:
        text = f.read()
    blocks = re.findall(r"(?:^    \S.*\n)+", text, re.M)
    staged = [b for b in blocks if "--destdir" in b]
    check(len(staged) == 1, "README.md has one staged-install block")
    return [l[4:] for l in staged[0].splitlines()]


def check_readme_staged(a, tmp, want):
    """README.md's staged install run as written: meson install --destdir,
    pkg-config through the variables it exports, the program built and run
    with the LD_LIBRARY_PATH it gives. Only the build directory
    (build-release) and the compiler (cc: this build's, with its
    sanitizer) are put in."""
    lines = readme_staged_block(a.source_root)
    cc = shlex.join(a.cc + a.cflag)
    script = []
    for l in lines:
        l = l.replace("build-release", shlex.quote(os.path.abspath(a.build_dir)))
        if l.startswith("cc "):
            l = cc + l[2:]
        script.append(l)
    work = os.path.join(tmp, "readme")
    os.makedirs(work)
    lib, header, extra = PROGRAMS["libmcp-h2c"]
    with open(os.path.join(work, "app.c"), "w") as f:
        f.write(SOURCE % {"header": header, "extra": extra})
    # A clean environment for what the block sets: nothing of ours leaks in.
    env = {k: v for k, v in os.environ.items()
           if k not in ("PKG_CONFIG_PATH", "PKG_CONFIG_SYSROOT_DIR",
                        "LD_LIBRARY_PATH")}
    out = run(["bash", "-euo", "pipefail", "-c", "\n".join(script)],
              env=env, cwd=work).strip().splitlines()
    check(out and out[-1] == want,
          "README.md's staged install, run as written, builds and runs its "
          "program: %r\n%s" % (out[-1:] if out else out, "\n".join(script)))


# Layers (docs/architecture.md): each module is a library of its own over
# the engine; a program takes the engine and one protocol, without libmcp.
LAYERS = {
    # package: (header, a call of the module, generated code it must not hold)
    "libmcp-engine": ("mcp/engine.h", "", ("istio__mcp", "conduit__",
                                           "docker__swarmkit")),
    "libmcp-mcp": ("mcp/mcp_v1alpha1.h", """
  mcp_source_options o;
  mcp_source_options_default(&o);
  if (o.store != NULL) return 3;""", ("conduit__", "docker__swarmkit")),
    "libmcp-destination": ("mcp/destination.h", """
  mcp_dest_server_options o;
  mcp_dest_server_options_default(&o);
  mcp_dest_addr ad;
  if (mcp_dest_ip_parse(&ad, "10.0.0.1", 80) != 0) return 3;""",
                           ("istio__mcp", "docker__swarmkit")),
    "libmcp-dispatcher": ("mcp/dispatcher.h", """
  mcp_disp_options o;
  mcp_disp_options_default(&o);""", ("istio__mcp", "conduit__")),
    "libmcp-xds": ("mcp/xds.h", """
  mcp_xds_server_options o;
  mcp_xds_server_options_default(&o);""", ("conduit__", "docker__swarmkit")),
}


def check_layers(a, tmp, dest, pcdir, libdir, env, want):
    for pc, (header, call, foreign) in LAYERS.items():
        lib = os.path.join(libdir, pc + ".a")
        check(os.path.isfile(os.path.join(pcdir, pc + ".pc")),
              pc + ".pc installed")
        check(os.path.isfile(lib), lib + " installed")
        syms = run(["nm", "--defined-only", lib]).lower()
        own = {"libmcp-engine": "google__protobuf", "libmcp-mcp": "istio__mcp",
               "libmcp-destination": "conduit__",
               "libmcp-dispatcher": "docker__swarmkit",
               "libmcp-xds": "mcp_xds_"}[pc]
        check(own in syms, "%s holds its own code (%s)" % (pc, own))
        held = [g for g in foreign if g in syms]
        check(not held, "%s holds no other protocol's generated code (%s)"
              % (pc, held))
        flags = shlex.split(run(["pkg-config", "--static", "--cflags",
                                 "--libs", pc], env=env))
        check(not any(f in ("-lmcp", "-lmcp_grpc", "-lmcp_h2c")
                      for f in flags),
              "%s links without libmcp: %s" % (pc, flags))
        src = os.path.join(tmp, pc + ".c")
        exe = os.path.join(tmp, pc)
        with open(src, "w") as f:
            f.write(SOURCE % {"header": header, "extra": call})
        run(a.cc + a.cflag + [src, "-o", exe] + flags, env=env)
        _, needed = dynamic(exe)
        check(not any(n.startswith("libmcp") for n in needed),
              "%s: the program is static in libmcp (%s)" % (pc, needed))
        out = run([exe], env=env).strip()
        check(out == want, "mcp_version() via %s: %r" % (pc, out))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build-dir", required=True)
    ap.add_argument("--version", required=True)
    ap.add_argument("--soversion", required=True)
    ap.add_argument("--cc", required=True, nargs="+")
    ap.add_argument("--transport", action="append", default=[])
    ap.add_argument("--cflag", action="append", default=[])
    ap.add_argument("--source-root", required=True)
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

        all_exported = set()
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
            all_exported.update(exported)
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
        missing = sorted(set(declared_extern(dest)) - all_exported)
        check(not missing, "every MCP_EXTERN function of the installed "
              "headers is exported (missing: %s)" % missing[:10])
        check_schema_istio(a, tmp, dest, pcdir, libdir, env)
        check_layers(a, tmp, dest, pcdir, libdir, env, want)
        if "h2c" in a.transport:
            check_readme_staged(a, tmp, want)
        else:
            print("skip: README.md's staged install builds an h2c program "
                  "(h2c not built)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
