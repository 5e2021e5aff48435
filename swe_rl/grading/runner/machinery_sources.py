"""The sources of the grader's own code in Go, JavaScript and Rust test runs (`machinery` says what they
check and why); each holds ``__REPORT__`` where the report's path goes.

- `NODE_GUARD`: a CommonJS preload (``NODE_OPTIONS=--require``), written for node 12+;
- `go_guard`: declarations appended to the Go canary file (random names: the package is the tests');
- `CARGO_RUNNER`: a POSIX shell script cargo runs each test binary through (``CARGO_TARGET_*_RUNNER``).
"""

from __future__ import annotations

import json

__all__ = ["CARGO_RUNNER", "GO_IMPORTS", "NODE_GUARD", "go_guard"]

NODE_GUARD = r"""'use strict';
// swe-rl grader: the test runner's machinery recorded before any package code, checked at exit.
(() => {
  const fs = require('fs'), Module = require('module');
  const REPORT = __REPORT__;
  const open = fs.openSync, write = fs.writeSync, stat = fs.statSync, stringify = JSON.stringify;
  const define = Object.defineProperty, started = Date.now();
  const describe = Object.getOwnPropertyDescriptor, ownKeys = Reflect.ownKeys, ErrorCtor = Error;
  let threadId = 0, main = true;
  try { const w = require('worker_threads'); threadId = w.threadId; main = w.isMainThread; } catch (e) {}
  const id = process.pid + '.' + threadId;
  let fd = -1;
  try { fd = open(REPORT, 'a'); } catch (e) { return; }
  const say = (event, detail) => { try { write(fd, id + ' ' + event + ' ' + stringify(detail) + '\n'); } catch (e) {} };
  const kind = !main ? 'worker' : process.env.NODE_TEST_CONTEXT ? 'test-file'
    : process.execArgv.includes('--test') ? 'runner' : 'other';
  say('start', { kind, argv: process.argv.slice(1, 4) });
  const caller = () => {
    const lines = String(new ErrorCtor().stack || '').split('\n').slice(3);
    for (const line of lines) {
      const m = /\(?((?:file:\/\/)?\/[^\s():]+):\d+:\d+\)?\s*$/.exec(line);
      if (m && m[1] !== __filename) return m[1].replace(/^file:\/\//, '');
    }
    return '';
  };
  const watched = [];
  const guard = (label, owner, keys) => {
    if (!owner || (typeof owner !== 'object' && typeof owner !== 'function')) return;
    for (const key of keys || ownKeys(owner)) {
      const d = describe(owner, key);
      if (!d || !('value' in d) || typeof d.value !== 'function' || !d.configurable) continue;
      let current = d.value;
      const name = label + '.' + String(key);
      const get = function () { return current; };
      const set = function (v) {
        if (v !== current) {
          const by = caller();
          let state = '';
          try { state = by && stat(by).ctimeMs >= started ? 'written' : ''; } catch (e) { state = 'gone'; }
          say('set', { name, by, state });
        }
        current = v;
      };
      define(owner, key, { get, set, enumerable: d.enumerable, configurable: true });
      watched.push({ owner, key, name, value: d.value, get, now: () => current });
    }
  };
  const assert = require('assert');
  guard('assert', assert);
  guard('assert.strict', assert.strict);
  if (kind === 'test-file') {
    try { const t = require('node:test'); guard('node:test', t); } catch (e) {}
  }
  guard('Module', Module, ['_load', '_resolveFilename', '_findPath', '_nodeModulePaths', 'wrap', 'register']);
  guard('Module.prototype', Module.prototype, ['require', '_compile', 'load']);
  guard('Module._extensions', Module._extensions);
  const modules = [['assert', assert], ['assert/strict', assert.strict]];
  const check = (where) => {
    for (const w of watched) {
      const d = describe(w.owner, w.key);
      if (!d || d.get !== w.get) say('changed', { name: w.name, how: 'redefined', where });
      else if (w.now() !== w.value) say('changed', { name: w.name, how: 'replaced', where });
    }
    for (const [name, value] of modules) {
      let now;
      try { now = require(name); } catch (e) { now = undefined; }
      if (now !== value) say('changed', { name: 'require(' + stringify(name) + ')', how: 'another module', where });
    }
  };
  process.on('exit', (code) => { check('exit'); say('end', { code }); });
})();
"""
"""The preload. ``require('assert')`` inside the check goes through ``Module._load``: a wrapper that hands
tests another assert module is seen twice (the wrapper, and the module it returns)."""

_GO_GUARD = """
var __G__Self = __G__Stat("/proc/self/exe")

func __G__Stat(path string) os.FileInfo {
	info, err := os.Stat(path)
	if err != nil {
		return nil
	}
	return info
}

func __G__Say(line string) {
	f, err := os.OpenFile(__REPORT__, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0644)
	if err != nil {
		return
	}
	defer f.Close()
	f.WriteString(strconv.Itoa(os.Getpid()) + " " + line + "\\n")
}

func __G__Parent(pid int) int {
	data, err := ioutil.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	text := string(data)
	fields := strings.Fields(text[strings.LastIndex(text, ")")+1:])
	if len(fields) < 2 {
		return 0
	}
	ppid, _ := strconv.Atoi(fields[1])
	return ppid
}

func __G__SameBinary(pid int) bool {
	other := __G__Stat("/proc/" + strconv.Itoa(pid) + "/exe")
	if other == nil || __G__Self == nil {
		return false
	}
	if os.SameFile(other, __G__Self) {
		return true
	}
	if other.Size() != __G__Self.Size() {
		return false
	}
	a, errA := ioutil.ReadFile("/proc/self/exe")
	b, errB := ioutil.ReadFile("/proc/" + strconv.Itoa(pid) + "/exe")
	return errA == nil && errB == nil && string(a) == string(b)
}

func __G__ReadsItself(fd int) string {
	link, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(fd))
	if err != nil || !strings.HasPrefix(link, "pipe:") {
		return ""
	}
	entries, _ := ioutil.ReadDir("/proc/self/fd")
	for _, e := range entries {
		other, _ := os.Readlink("/proc/self/fd/" + e.Name())
		info, _ := ioutil.ReadFile("/proc/self/fdinfo/" + e.Name())
		for _, row := range strings.Split(string(info), "\\n") {
			if other == link && strings.HasPrefix(row, "flags:") {
				flags, _ := strconv.ParseInt(strings.TrimSpace(row[6:]), 8, 64)
				if flags&3 == 0 {
					return "fd " + strconv.Itoa(fd) + " is a pipe the test binary reads itself (" + link + ")"
				}
			}
		}
	}
	return ""
}

func __G__Check(where string) {
	var found []string
	for pid, n := __G__Parent(os.Getpid()), 0; pid > 1 && n < 64; pid, n = __G__Parent(pid), n+1 {
		if __G__SameBinary(pid) {
			found = append(found, "the test binary runs under its own binary (process "+strconv.Itoa(pid)+"): re-executed")
			break
		}
	}
	if os.Stdout == nil || os.Stdout.Fd() != 1 || os.Stderr == nil || os.Stderr.Fd() != 2 {
		found = append(found, "os.Stdout or os.Stderr is not fd 1 / fd 2")
	}
	for _, fd := range []int{1, 2} {
		if why := __G__ReadsItself(fd); why != "" {
			found = append(found, why)
		}
	}
	if len(found) == 0 {
		__G__Say("ok " + strconv.Quote(where))
	}
	for _, why := range found {
		__G__Say("changed " + strconv.Quote(where+": "+why))
	}
}

func init() {
	__G__Say("start")
	__G__Check("init")
}
"""

GO_IMPORTS = ("io/ioutil", "os", "strconv", "strings")
"""What `go_guard`'s code imports besides ``testing``."""


def go_guard(prefix: str, report: str) -> str:
    """The Go guard's declarations with their names prefixed by `prefix` (a random word: no clash with
    the package's own names) and the report's path in place; ``<prefix>Check("test")`` is the checkpoint."""
    return _GO_GUARD.replace("__REPORT__", json.dumps(report)).replace("__G__", prefix)


CARGO_RUNNER = r"""#!/bin/sh
# swe-rl grader: cargo runs every test binary through this; libtest's own list of the binary's tests is
# recorded before the run, the run's output beside it.
r=__REPORT__
bin=$1
id=$$
printf '### binary %s %s\n' "$id" "$*" >> "$r"
if grep -qa -e '--test-threads' "$bin" 2>/dev/null; then
  { "$@" --list 2>/dev/null | sed 's/^/| /'; } >> "$r"
else
  echo '| <no libtest>' >> "$r"
fi
{ "$@"; echo "$?" > "$r.$id.rc"; } | tee "$r.$id.out"
rc=$(cat "$r.$id.rc" 2>/dev/null || echo 1)
{ printf '### run %s %s\n' "$id" "$rc"; sed 's/^/| /' "$r.$id.out"; } >> "$r"
rm -f "$r.$id.out" "$r.$id.rc"
exit "$rc"
"""
