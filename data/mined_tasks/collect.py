"""Gather the miner's outputs of several repositories into the mined set's files.

    python3 data/mined_tasks/collect.py --set data/mined_tasks --mined DIR name [name ...]

For each ``name``, ``DIR/<name>/tasks.jsonl`` (certified rows), ``tasks.drops.jsonl`` (every dropped
commit, with its stage and reason), the verdicts of ``tasks.ledger.jsonl`` on validated rows a cut
run did not write yet (`settle`) and ``tasks.stats.json`` (the run's counts and seconds) are merged
into the set's ``instances.jsonl``, ``drops.jsonl`` (each drop given its ``repo``) and ``runs.jsonl``
(one line per repository; ``pending``: rows validated but not yet certified or dropped, a run cut
short). A release-anchored name (releases.tsv, ``--release NAME=PACKAGE==VERSION``) gives its rows,
drops and run line the field ``release``, and replaces only the lines of that release: a repository
can have both rows mined from its history and rows on a release. A row whose statement does not pass the leak check as a whole
(`swe_rl.eval.mining.statements.leaks`) is not merged: it goes to the drops, stage ``policy``, with
the reasons. The files of the repositories not named are kept as they are; the output is sorted, so
a re-run of the same mining gives the same bytes.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from swe_rl.eval.mining.statements import leaks


def _read(path: Path) -> list[dict]:
    return [json.loads(ln) for ln in path.read_text().splitlines() if ln.strip()] if path.exists() else []


def _write(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in rows))


def leak_drop(row: dict) -> dict | None:
    """The drop of a row whose statement gives the fix away, else None."""
    f2p = row["FAIL_TO_PASS"]
    known = row["test_patch"] + "\n" + "\n".join(json.loads(f2p) if isinstance(f2p, str) else f2p)
    reasons = leaks(row["problem_statement"], row["patch"], known=known)
    if not reasons:
        return None
    return {"commit": row["mined_commit"], "instance_id": row["instance_id"], "repo": row["repo"],
            "stage": "policy", "reason": "the statement leaks: " + "; ".join(reasons)}  # fmt: skip


def settle(out: Path, rows: list[dict], drops: list[dict]) -> tuple[list[dict], list[dict]]:
    """The validated rows a cut run's certification ledger already decided: (certified, drops).

    The miner writes a repository's certified rows when its whole certification ends; a run cut
    before then has the verdicts in ``tasks.ledger.jsonl`` only. They are taken as the miner takes
    them (`swe_rl.eval.mining.cli.Miner.certify`): certified → a row, not certified → a drop at
    ``certify`` with the ledger's reason, a fleet failure (``env_error``) or no entry → still pending.
    """
    decided = {r["instance_id"] for r in rows} | {d["instance_id"] for d in drops}
    ledger = {e["instance_id"]: e for e in _read(out / "tasks.ledger.jsonl")}  # the last entry wins
    certified, dropped = [], []
    for row in _read(out / "tasks.validated.jsonl"):
        entry = ledger.get(row["instance_id"])
        if row["instance_id"] in decided or entry is None or entry.get("env_error"):
            continue
        if entry.get("certified"):
            certified.append(row)
        else:
            dropped.append({"commit": row["mined_commit"], "instance_id": row["instance_id"], "stage": "certify",
                            "reason": entry.get("reason") or "not certified"})  # fmt: skip
    return certified, dropped


def _repo_of(out: Path, rows: list[dict], drops: list[dict]) -> str:
    """owner/name of a miner's output: its rows say it; else the drops' instance ids do."""
    if rows:
        return str(rows[0]["repo"])
    for drop in drops:
        owner, _, rest = str(drop.get("instance_id", "")).partition("__")
        if rest:
            return f"{owner}/{rest.rsplit('-', 1)[0]}"
    raise SystemExit(f"error: {out}: no row and no drop says which repository this is")


def collect(
    set_dir: Path, mined: Path, names: list[str], releases: dict[str, str] | None = None
) -> dict[str, int]:
    """Merge; returns the certified rows per repository (per release for a release's name) merged."""
    releases = releases or {}
    new_rows: list[dict] = []
    new_drops: list[dict] = []
    runs: list[dict] = []
    done: dict[str, int] = {}
    done_releases: set[str] = set()
    for name in names:
        tag = {"release": releases[name]} if name in releases else {}
        out = mined / name
        rows, drops = _read(out / "tasks.jsonl"), _read(out / "tasks.drops.jsonl")
        settled_rows, settled_drops = settle(out, rows, drops)
        rows, drops = rows + settled_rows, drops + settled_drops
        repo = _repo_of(out, rows, drops)
        stats_file = out / "tasks.stats.json"
        stats = json.loads(stats_file.read_text()) if stats_file.exists() else {}
        leaking = {r["instance_id"]: drop for r in rows if (drop := leak_drop(r))}
        new_rows += [{**r, **tag} for r in rows if r["instance_id"] not in leaking]
        new_drops += [{**d, "repo": repo, **tag} for d in drops] + [{**d, **tag} for d in leaking.values()]
        decided = {r["instance_id"] for r in rows} | {d["instance_id"] for d in drops}
        pending = [
            r["instance_id"] for r in _read(out / "tasks.validated.jsonl") if r["instance_id"] not in decided
        ]
        runs.append({"name": name, "repo": repo, "stats": stats, "pending": len(pending), **tag})
        done[tag.get("release", repo)] = len(rows) - len(leaking)
        done_releases |= set(tag.values())

    def keep(line: dict) -> bool:  # the other repositories' and releases' lines stay
        return line["release"] not in done_releases if "release" in line else line["repo"] not in done

    rows = [*filter(keep, _read(set_dir / "instances.jsonl")), *new_rows]
    drops = [*filter(keep, _read(set_dir / "drops.jsonl")), *new_drops]
    all_runs = [*filter(keep, _read(set_dir / "runs.jsonl")), *runs]
    _write(set_dir / "instances.jsonl", sorted(rows, key=lambda r: r["instance_id"]))
    _write(set_dir / "drops.jsonl", sorted(drops, key=lambda d: (d["repo"], d["commit"])))
    _write(set_dir / "runs.jsonl", sorted(all_runs, key=lambda r: r["repo"]))
    return done


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--set", type=Path, required=True, help="the set's folder (data/mined_tasks)")
    ap.add_argument(
        "--mined", type=Path, required=True, help="the folder of the miner's outputs, one per name"
    )
    ap.add_argument(
        "--release", action="append", default=[], metavar="NAME=PACKAGE==VERSION",
        help="a name of releases.tsv and its release (repeatable)",
    )  # fmt: skip
    ap.add_argument("names", nargs="+")
    args = ap.parse_args(argv)
    releases = {name: release for name, _, release in (r.partition("=") for r in args.release)}
    missing = [n for n in args.names if not (args.mined / n).is_dir()]
    if missing:
        ap.error(f"no miner output for {', '.join(missing)} in {args.mined}")
    done = collect(args.set, args.mined, args.names, releases)
    total = sum(1 for ln in (args.set / "instances.jsonl").read_text().splitlines() if ln.strip())
    print(
        f"merged {sum(done.values())} certified rows of {len(done)} repositories or releases; the set has {total}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
