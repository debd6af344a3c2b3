"""Shared parts of test_interop_destination.py and test_interop_dispatcher.py.

Our programs (mcp-source, mcp-sink from --build-dir, or MCP_INTEROP_BUILD_DIR)
against the Node peers of this directory. The child-process plumbing (Proc,
free_port, the transport probe) is test_interop.py's.

Skips, each with its reason: our programs not built; node not installed; the
transport not built in; a program whose --help does not offer the flag a case
needs (the issue's flags, literal). Everything else that goes wrong fails.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import test_interop as ti  # noqa: E402  (Proc, free_port, transport probe)

DEADLINE = ti.DEADLINE
OPTS = argparse.Namespace(build_dir=os.environ.get('MCP_INTEROP_BUILD_DIR', 'build'), transport='grpc')

_help = {}


def help_text(binary):
    """The program's --help (stdout + stderr), cached."""
    if binary not in _help:
        try:
            r = subprocess.run([binary, '--help'], stdin=subprocess.DEVNULL, capture_output=True, timeout=20)
            _help[binary] = (r.stdout + r.stderr).decode('utf-8', 'replace')
        except (OSError, subprocess.TimeoutExpired) as e:
            _help[binary] = f'<{binary} --help failed: {e}>'
    return _help[binary]


def lacks(binary, *words):
    """The words (flags, API names) `binary --help` does not mention."""
    text = help_text(binary)
    return [w for w in words if w not in text]


class EngineBase(unittest.TestCase):
    """Our programs + the Node peers; every child is stopped in tearDown
    and must exit 0 on SIGTERM (sanitizer builds report there)."""

    # (program, words its --help must show) for the whole class; a case can
    # ask for more with self.need().
    needs = ()

    @classmethod
    def setUpClass(cls):
        build = os.path.abspath(OPTS.build_dir)
        cls.src_bin = os.path.join(build, 'tools', 'mcp-source')
        cls.sink_bin = os.path.join(build, 'tools', 'mcp-sink')
        missing = [b for b in (cls.src_bin, cls.sink_bin) if not os.access(b, os.X_OK)]
        if missing:
            raise unittest.SkipTest(f'our programs are not built: missing {", ".join(missing)}')
        cls.node = shutil.which('node')
        if not cls.node:
            raise unittest.SkipTest('node is not installed (needed for the @grpc/grpc-js peers)')
        for prog, words in cls.needs:
            binary = cls.src_bin if prog == 'mcp-source' else cls.sink_bin
            gone = lacks(binary, *words)
            if gone:
                raise unittest.SkipTest(f'{prog} --help does not offer {" ".join(gone)} (not implemented in this build)')
        ti.OPTS.transport = OPTS.transport
        why = ti.transport_unavailable(cls.sink_bin)
        if why:
            raise unittest.SkipTest(f'transport not available: {why}')
        if not os.path.isdir(os.path.join(HERE, 'node_modules', '@grpc', 'grpc-js')):
            subprocess.run(['npm', 'ci', '--prefix', HERE, '--no-audit', '--no-fund'],
                           check=True, timeout=600, stdout=subprocess.DEVNULL)

    def need(self, prog, *words):
        binary = self.src_bin if prog == 'mcp-source' else self.sink_bin
        gone = lacks(binary, *words)
        if gone:
            self.skipTest(f'{prog} --help does not offer {" ".join(gone)} (not implemented in this build)')

    def setUp(self):
        self.procs = []
        self.tmp = tempfile.mkdtemp(prefix='mcp-interop-engine-')
        self.conf = os.path.join(self.tmp, 'config')
        os.makedirs(self.conf)

    def tearDown(self):
        failed = not getattr(self._outcome, 'success', True)
        unclean = []
        for p in self.procs:
            if p.stop() not in (0, None):
                unclean.append(p)
            if failed or os.environ.get('INTEROP_VERBOSE'):
                sys.stderr.write(p.describe() + '\n')
        report = '\n'.join(p.describe() for p in unclean)
        for p in self.procs:
            p.close()
        shutil.rmtree(self.tmp, ignore_errors=True)
        if unclean and not failed:
            self.fail('children did not exit with status 0:\n' + report)

    def spawn(self, name, argv):
        p = ti.Proc(name, argv)
        self.procs.append(p)
        return p

    def ours(self, name, argv, port=None):
        p = self.spawn(name, argv + ['--transport', OPTS.transport])
        if port is not None:
            self.wait_port(p, port)
        return p

    def wait_port(self, p, port):
        import socket
        end = time.monotonic() + DEADLINE
        while time.monotonic() < end:
            if p.p.poll() is not None:
                self.fail(f'{p.name} exited before listening\n{p.describe()}')
            try:
                socket.create_connection(('127.0.0.1', port), 0.2).close()
                return
            except OSError:
                time.sleep(0.05)
        self.fail(f'{p.name} is not listening on {port}\n{p.describe()}')

    def node_peer(self, script, args):
        return self.spawn(f'node {script}', [self.node, os.path.join(HERE, script)] + args)

    def listening(self, p):
        return p.wait_for(lambda l: l.get('event') == 'listening', 'listening')['address']

    def write_yaml(self, rel, text):
        path = os.path.join(self.conf, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = os.path.join(os.path.dirname(path), '.' + os.path.basename(path) + '.tmp')
        with open(tmp, 'w') as f:
            f.write(text)
        os.replace(tmp, path)  # atomic: the source never sees half a file

    def remove_yaml(self, rel):
        os.unlink(os.path.join(self.conf, rel))

    def write_state(self, obj, peer=None):
        """The Node server's/manager's JSON state; SIGHUP to |peer| reloads it."""
        self.state_file = os.path.join(self.tmp, 'state.json')
        with open(self.state_file + '.tmp', 'w') as f:
            json.dump(obj, f)
        os.replace(self.state_file + '.tmp', self.state_file)
        if peer is not None:
            mark = peer.mark()
            peer.signal(__import__('signal').SIGHUP)
            peer.wait_for(lambda l: l.get('event') == 'reloaded', 'the peer reloads its state', since=mark)

    def certs(self):
        """tests/gen_certs.sh's certificates in a temp dir (both transports
        have TLS); skips without openssl."""
        d = os.path.join(self.tmp, 'certs')
        p = subprocess.run(['sh', os.path.join(HERE, '..', 'gen_certs.sh'), d], capture_output=True, text=True)
        if p.returncode != 0:
            self.skipTest(f'gen_certs.sh failed (openssl?): {p.stderr[-300:]}')
        return lambda name: os.path.join(d, name)


def main():
    ap = argparse.ArgumentParser(add_help=False)
    ap.add_argument('--build-dir', default=OPTS.build_dir)
    ap.add_argument('--transport', choices=('grpc', 'h2c'), default='grpc')
    args, rest = ap.parse_known_args()
    OPTS.build_dir, OPTS.transport = args.build_dir, args.transport
    prog = unittest.main(module='__main__', argv=[sys.argv[0]] + rest, exit=False)
    r = prog.result
    if not r.wasSuccessful():
        sys.exit(1)
    # Nothing ran, only skips (our side lacks the API): 77, meson's SKIP.
    sys.exit(77 if r.testsRun == 0 and r.skipped else 0)
