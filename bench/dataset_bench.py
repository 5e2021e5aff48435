"""Conversion of 50,000-row data sets: rows/s and peak memory of `swe-preprocess --format`, per set.

For each set (SWE-rebench V2, SWE-smith, Multi-SWE-bench, SWE-bench-Live, SWE-bench Multilingual)
it synthesises rows in that set's schema (the fixture rows of tests/tasks/fixtures/datasets with
new ids, patches of ``--patch-kb`` KiB and 20 PASS_TO_PASS tests; 1 row in 50 is broken on
purpose, so rejects are exercised), writes them to a temporary JSONL, and converts it with
`swe_rl.data.stream_convert.convert_file` in a fresh child process, twice: at ``--rows`` and at a
tenth of it. Measured in the same run, per set: rows/s; the child's peak RSS (VmHWM) above its
RSS after one warm-up row (imports such as swebench's are a fixed cost, not counted); that growth
per row; and the ratio of the growth at N rows to the growth at N/10. The conversion keeps the
distinct instance ids and image names (duplicates, the image list), so some growth per row is
expected: it should be a few hundred bytes whatever the rows' size (compare with "MiB in").
Printed, not asserted.

    python bench/dataset_bench.py [--rows 50000] [--sets swe-smith ...] [--patch-kb 1]
"""

from __future__ import annotations

import argparse
import copy
import json
import multiprocessing as mp
import sys
import tempfile
import time
from multiprocessing.connection import wait
from pathlib import Path
from typing import Any

FIXTURES = Path(__file__).parents[1] / "tests" / "tasks" / "fixtures" / "datasets"
SETS = {
    "swe-rebench-v2": "swe_rebench_v2",
    "swe-smith": "swe_smith",
    "multi-swe-bench": "multi_swe_bench",
    "swe-bench-live": "swe_bench_live",
    "swe-bench-multilingual": "swe_bench_multilingual",
}


_MULTILINGUAL_SCRIPT = (
    "#!/bin/bash\nset -uxo pipefail\ncd /testbed\n: '>>>>> Start Test Output'\n"
    "go test -v ./...\n: '>>>>> End Test Output'\n"
)


def _patch(path: str, kib: int, seed: int) -> str:
    body = "".join(f"-old line {seed} {i}\n+new line {seed} {i}\n" for i in range(max(1, kib * 1024 // 40)))
    return f"diff --git a/{path} b/{path}\n--- a/{path}\n+++ b/{path}\n@@ -1,{body.count('-old')} +1,{body.count('+new')} @@\n{body}"


def synth_row(fmt: str, template: dict[str, Any], i: int, kib: int) -> dict[str, Any]:
    row = copy.deepcopy(template)
    p2p = [f"tests/test_mod.py::test_keep_{k}" for k in range(20)]
    if fmt == "multi-swe-bench":
        row.update(number=100000 + i, instance_id=f"cli__cli-{100000 + i}")
        row["fix_patch"], row["test_patch"] = _patch("pkg/a.go", kib, i), _patch("pkg/a_test.go", kib, i)
        row["p2p_tests"] = {t: {"run": "PASS", "test": "PASS", "fix": "PASS"} for t in p2p}
    else:
        row["instance_id"] = f"{template['instance_id']}-{i}"
        row["patch"] = _patch("src/mod.py", kib, i)
        if fmt != "swe-smith":
            row["test_patch"] = _patch("tests/test_mod.py", kib, i)
        row["PASS_TO_PASS"] = json.dumps(p2p) if fmt == "swe-bench-multilingual" else p2p
        for key in ("pr_description", "interface"):
            row.pop(key, None)
    if fmt == "swe-bench-multilingual":  # swebench 5.x's schema: the pinned swebench converts it
        row.update(eval_script=_MULTILINGUAL_SCRIPT, log_parser="parse_log_gotest", eval_type="pass_and_fail")
    if i % 50 == 49:  # a broken row: no tests to pass
        for key in ("FAIL_TO_PASS", "f2p_tests", "n2p_tests", "s2p_tests"):
            row[key] = [] if key.isupper() else {}
    return row


def write_rows(fmt: str, n: int, kib: int, path: Path) -> None:
    template = json.loads((FIXTURES / f"{SETS[fmt]}.jsonl").read_text().splitlines()[0])
    with path.open("w", encoding="utf-8") as fh:
        for i in range(n):
            fh.write(json.dumps(synth_row(fmt, template, i, kib)) + "\n")


def _status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def _child(fmt: str, source: str, output: str, conn: Any) -> None:
    """Convert in this process and send ``("ok", ...)``; any error is sent as ``("error", text)``."""
    try:
        from swe_rl.data.stream_convert import convert_file
        from swe_rl.tasks.datasets import convert_row

        with open(source, encoding="utf-8") as fh:  # warm-up: the loader's imports are not the rows' cost
            convert_row(json.loads(fh.readline()), fmt)
        before = _status_kib("VmRSS")
        summary = convert_file(Path(source), Path(output), fmt=fmt, progress_every=0)
        conn.send(("ok", (summary.model_dump(), summary.rows_per_second, before, _status_kib("VmHWM"))))
    except BaseException as exc:  # the parent must hear of it, or it would wait forever
        conn.send(("error", f"{type(exc).__name__}: {exc}"))
        raise
    finally:
        conn.close()


class WorkerFailed(RuntimeError):
    """The conversion worker raised or died; the bench stops with its error."""


def measure(fmt: str, source: Path, output: Path) -> tuple[dict[str, Any], float, int]:
    ctx = mp.get_context("spawn")  # a fresh interpreter: its peak RSS is the conversion's own
    receiver, sender = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child, args=(fmt, str(source), str(output), sender))
    proc.start()
    sender.close()  # only the child holds the sending end: its death closes the pipe
    try:
        wait([receiver, proc.sentinel])  # a result, or the child's end, whichever comes first
        try:
            kind, payload = receiver.recv()
        except EOFError:
            proc.join()
            raise WorkerFailed(
                f"{fmt}: the worker died (exit code {proc.exitcode}) without a result"
            ) from None
    finally:
        proc.join()
        receiver.close()
    if kind != "ok":
        raise WorkerFailed(f"{fmt}: the worker failed: {payload}")
    summary, rate, before, peak = payload
    return summary, rate, peak - before


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rows", type=int, default=50_000)
    p.add_argument("--sets", nargs="+", choices=list(SETS), default=list(SETS))
    p.add_argument("--patch-kb", type=int, default=1, help="size of each synthetic patch, KiB")
    args = p.parse_args()
    print(f"rows={args.rows} (and {args.rows // 10} for the memory ratio), patch={args.patch_kb} KiB")
    print(
        f"{'set':<24}{'rows/s':>9}{'converted':>11}{'rejected':>10}{'MiB in':>8}{'peak+ MiB':>11}{'B/row':>7}{'growth x':>10}"
    )
    with tempfile.TemporaryDirectory() as tmp:
        for fmt in args.sets:
            results = []
            for n in (args.rows // 10, args.rows):
                src = Path(tmp) / f"{fmt}-{n}.jsonl"
                t0 = time.perf_counter()
                write_rows(fmt, n, args.patch_kb, src)
                size = src.stat().st_size / 2**20
                try:
                    measured = measure(fmt, src, Path(tmp) / "out.jsonl")
                except WorkerFailed as exc:
                    print(f"error: {exc}", file=sys.stderr)
                    return 1
                results.append((*measured, size, time.perf_counter() - t0))
                src.unlink()
            (_, _, small_growth, _, _), (summary, rate, growth, size, _) = results
            ratio = growth / small_growth if small_growth > 0 else float("nan")
            print(
                f"{fmt:<24}{rate:>9.0f}{summary['converted']:>11}{summary['rejected']:>10}"
                f"{size:>8.0f}{growth / 1024:>11.1f}{growth * 1024 / args.rows:>7.0f}{ratio:>10.2f}"
            )
    print(
        "peak+ = the child's VmHWM minus its VmRSS after a warm-up row; B/row = peak+ / rows; "
        "growth x = peak+ at N / at N/10"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
