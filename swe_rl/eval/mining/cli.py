"""``swe-mine-tasks``: mine certified SWE tasks from a range of a local git repository's history.

For each commit of the range (oldest first): split it into a gold patch and a test patch (commits
that do not change code and tests together are dropped), build its task image offline, run the
tests before and after the gold patch (FAIL_TO_PASS, PASS_TO_PASS), then certify every row that
has FAIL_TO_PASS tests with `swe_rl.eval.certify` (the gold patch K times, the empty patch once,
flaky tests recorded) and keep what certifies.

Files, all next to ``--output`` (``tasks.jsonl``):

- ``tasks.jsonl``: the certified rows (swebench 5.x's schema);
- ``tasks.drops.jsonl``: ``{"commit", "instance_id", "stage", "reason"}`` for every commit dropped;
- ``tasks.validated.jsonl``: rows waiting for certification; ``tasks.ledger.jsonl``: the ledger;
- ``tasks.stats.json``: the yield per stage and the time spent in each.

Resumable: a commit in the output or the drops file is not looked at again, a validated row is not
built again, and certification skips what its ledger holds. A progress bar on a terminal, one plain
line per commit otherwise.

    swe-mine-tasks /path/to/repo --range v1.0..v1.4 --repo-name owner/name --output out/tasks.jsonl
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import Any

from swe_rl.eval.mining.build import BuildFailed, build_task_image
from swe_rl.eval.mining.envs import EnvFailed, EnvironmentMaker, EnvUnavailable
from swe_rl.eval.mining.history import Candidate, Skipped, commits_in_range, git, split_commit
from swe_rl.eval.mining.languages import LANGUAGES, UnknownLanguage, detect_language
from swe_rl.eval.mining.policy import RowPolicy, after_validation, before_build
from swe_rl.eval.mining.recipes import REPO_RECIPE, Recipe, RecipeError, detect_recipe, load_recipe
from swe_rl.eval.mining.statements import SOURCES, StatementSettings, split_provenance, write_statement
from swe_rl.eval.mining.validate import NoFailToPass, task_row, test_section, validate
from swe_rl.eval.progress import StatusBar

STAGES = ("split", "env", "build", "validate", "certify")
API_KEY_ENV = "SWE_MINE_STATEMENT_API_KEY"
"""The statement model's API key (never a command-line argument: it would show in ``ps``)."""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], epilog="See docs/datasets.md, 'Mining tasks'."
    )
    p.add_argument("repo", type=Path, help="a local git repository (a mirror, or a history of releases)")
    p.add_argument(
        "--range", dest="rev_range", default="HEAD", help="revision range, e.g. v1.0..v1.4 (default: all)"
    )
    p.add_argument(
        "--output", type=Path, required=True, help="certified rows (JSONL); other files go next to it"
    )
    p.add_argument("--repo-name", default=None, help="owner/name for the rows (default: the folder's name)")
    p.add_argument(
        "--language", choices=sorted(LANGUAGES), default=None, help="default: from the top's files"
    )
    p.add_argument(
        "--image-template", default="swe-rl/mined.{id}:latest", help="task image name; {id} is the id"
    )
    p.add_argument("--runs", type=int, default=3, help="gold runs per row at certification (K)")
    p.add_argument("--limit", type=int, default=None, help="look at most at this many new commits")
    p.add_argument("--timeout", type=float, default=1800.0, help="seconds per build or test run")
    p.add_argument(
        "--code-only-ok", action="store_true",
        help="commits that change code only are candidates too, judged by the tests already there "
        "(histories of injected bugs, SWE-smith's method)",
    )  # fmt: skip
    p.add_argument(
        "--recipe", type=Path, default=None,
        help=f"a recipe file (TOML: test_command, log_parser, ...; default: the repository's {REPO_RECIPE})",
    )  # fmt: skip
    p.add_argument(
        "--with-deps", action="store_true",
        help="task images on environment images with the project's dependencies as of the commit's date "
        "(Python: uv pip install; JavaScript: npm install; Go/Rust: commits needing modules/crates dropped)",
    )  # fmt: skip
    p.add_argument("--jobs", type=int, default=2, help="candidates built and validated at once")
    p.add_argument("--certify-concurrency", type=int, default=2, help="certification runs at once")
    g = p.add_argument_group("row policy (docs/datasets.md, 'Row policy')")
    g.add_argument(
        "--max-files", type=int, default=RowPolicy.max_files, help="source files a gold patch may touch"
    )
    g.add_argument("--max-lines", type=int, default=RowPolicy.max_lines, help="lines a gold patch may change")
    g.add_argument(
        "--max-fail-to-pass",
        type=int,
        default=RowPolicy.max_fail_to_pass,
        help="FAIL_TO_PASS tests a row may have",
    )
    g.add_argument("--allow-no-pass-to-pass", action="store_true", help="keep rows without PASS_TO_PASS")
    g.add_argument(
        "--keep-import-failures", action="store_true", help="keep rows whose FAIL_TO_PASS failed to import"
    )
    g.add_argument(
        "--keep-copyable", action="store_true", help="keep rows whose fix is in another file already"
    )
    g.add_argument(
        "--flag-only", action="store_true", help="drop nothing: reasons go to the row's policy_flags"
    )
    g = p.add_argument_group("problem statements (docs/datasets.md, 'Statements')")
    g.add_argument(
        "--statement", choices=SOURCES, default="tests", help="source tried first (fallback: tests)"
    )
    g.add_argument(
        "--statement-model-url",
        default=None,
        help="OpenAI-compatible base URL (.../v1); key in $" + API_KEY_ENV,
    )
    g.add_argument("--statement-model", default=StatementSettings.model, help="the model's name at that URL")  # fmt: skip
    p.add_argument("--no-certify", action="store_true", help="stop after validation (rows stay pending)")
    p.add_argument("--local-fleet", action="store_true", help="certify on exec + pool servers started here")
    p.add_argument("--name-prefix", default="swe-rl-mine", help="prefix of the miner's container names")
    p.add_argument("--no-progress", action="store_true", help="no progress output")
    p.add_argument(
        "--images-for", type=Path, default=None, metavar="ROWS",
        help="only (re)build the task images of these mined rows (their mined_commit in REPO) and check "
        "that each image's base commit is the row's; no mining",
    )  # fmt: skip
    return p.parse_args(argv)


def build_images_for(args: argparse.Namespace) -> int:
    """Build the images of already mined rows (CI, a fresh machine); 1 when a base commit differs."""
    repo = args.repo.resolve()
    bad = 0
    for row in _read_jsonl(args.images_for):
        if args.repo_name and row.get("repo") != args.repo_name:
            continue  # a set of several repositories: this one's rows only
        commit = row["mined_commit"]
        if not _has_commit(repo, commit):
            continue  # a row of another history of the same repository (releases vs injected bugs)
        parent = git(repo, "rev-parse", f"{commit}^").strip()
        language = (
            LANGUAGES[row["language"]]
            if row.get("language") in LANGUAGES
            else detect_language(set(git(repo, "ls-tree", "--name-only", commit).split()))
        )
        env = None
        if row.get("env_image"):
            recipe = recipe_for(repo, parent, language.name, args.recipe, detected=True)
            env = EnvironmentMaker(repo, args.repo_name or row["repo"], timeout=args.timeout).task_env(
                parent, language.name, recipe
            )
            if env is not None and env.image != row["env_image"]:
                print(f"{row['instance_id']}: environment {env.image} != the row's {row['env_image']}")
                bad += 1
                continue
        base = build_task_image(
            repo, parent, language, row["image_name"], row["instance_id"], timeout=args.timeout, env=env
        )
        status = (
            "ok" if base == row["base_commit"] else f"base commit {base} != the row's {row['base_commit']}"
        )
        bad += status != "ok"
        print(f"{row['instance_id']}: {row['image_name']} {status}", flush=True)
    return 1 if bad else 0


def recipe_for(repo: Path, commit: str, language: str, given: Path | None, *, detected: bool) -> Recipe:
    """With dependencies (``detected``): what the tree says with the repository's recipe file over it,
    and the given file over both; else `recipe_at`."""
    if not detected:
        return recipe_at(repo, commit, given)
    recipe = detect_recipe(repo, commit, language)
    return load_recipe(given.read_text(), base=recipe, where=str(given)) if given is not None else recipe


def recipe_at(repo: Path, commit: str, given: Path | None) -> Recipe:
    """The recipe file given, else the repository's own at ``commit``, else none (the defaults)."""
    if given is not None:
        return load_recipe(given.read_text(), where=str(given))
    own = git(repo, "show", f"{commit}:{REPO_RECIPE}", check=False)
    return load_recipe(own, where=f"{commit[:10]}:{REPO_RECIPE}") if own else Recipe()


def _has_commit(repo: Path, commit: str) -> bool:
    return bool(git(repo, "rev-parse", "--verify", "--quiet", f"{commit}^{{commit}}", check=False).strip())


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    rows = []
    for line in path.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue  # a torn last line of an interrupted run
    return rows


def _append(path: Path, row: dict[str, Any]) -> None:
    with path.open("a") as fh:
        fh.write(json.dumps(row) + "\n")


def _instance_id(repo_name: str, commit: str) -> str:
    owner, _, name = repo_name.partition("/")
    slug = f"{owner}__{name}" if name else owner
    return re.sub(r"[^A-Za-z0-9_.-]", "-", f"{slug}-{commit[:10]}")


class Miner:
    """One run over one repository; the files it writes are named after ``output``."""

    def __init__(self, args: argparse.Namespace, pool_env: dict[str, str] | None = None) -> None:
        self.args = args
        self.pool_env = pool_env
        out: Path = args.output
        self.output = out
        self.drops = out.with_suffix(".drops.jsonl")
        self.validated = out.with_suffix(".validated.jsonl")
        self.ledger = out.with_suffix(".ledger.jsonl")
        self.stats_path = out.with_suffix(".stats.json")
        self.repo = args.repo.resolve()
        self.repo_name = args.repo_name or self.repo.name
        self.policy = RowPolicy(
            max_files=args.max_files, max_lines=args.max_lines, max_fail_to_pass=args.max_fail_to_pass,
            require_pass_to_pass=not args.allow_no_pass_to_pass, drop_import_failures=not args.keep_import_failures,
            drop_copyable=not args.keep_copyable, flag_only=args.flag_only,
        )  # fmt: skip
        self.statements = StatementSettings(
            source=args.statement, model_url=args.statement_model_url, model=args.statement_model,
            api_key=os.environ.get(API_KEY_ENV),
        )  # fmt: skip
        self.lock = threading.Lock()
        """Guards the files and counters: candidates are built and validated by ``--jobs`` threads."""
        self.seconds = dict.fromkeys(STAGES, 0.0)
        self.counts = {"commits": 0, "candidates": 0, "built": 0, "validated": 0, "certified": 0}
        self.envs = (
            EnvironmentMaker(self.repo, self.repo_name, timeout=args.timeout) if args.with_deps else None
        )

    def drop(self, commit: str, instance_id: str, stage: str, reason: str) -> None:
        with self.lock:
            _append(
                self.drops, {"commit": commit, "instance_id": instance_id, "stage": stage, "reason": reason}
            )

    def add(self, what: dict[str, float], key: str, amount: float) -> None:
        with self.lock:
            what[key] += amount

    def count(self, key: str) -> None:
        with self.lock:
            self.counts[key] += 1

    def judged(self, cand: Candidate, iid: str, reasons: list[str], flags: list[str]) -> bool:
        """True when the row goes on: the policy found nothing, or only flags (``--flag-only``)."""
        if not reasons:
            return True
        if self.policy.flag_only:
            flags.extend(reasons)
            return True
        self.drop(cand.commit, iid, "policy", "; ".join(reasons))
        return False

    def language(self, commit: str) -> Any:
        """The language's way of building and testing, with the recipe's test command and parser."""
        if self.args.language:
            base = LANGUAGES[self.args.language]
        else:
            base = detect_language(set(git(self.repo, "ls-tree", "--name-only", commit).split()))
        return recipe_for(
            self.repo, commit, base.name, self.args.recipe, detected=self.envs is not None
        ).language(base)

    def split(self, commit: str) -> tuple[Candidate, Any, str, list[str]] | None:
        """Split one commit and judge what the commit alone tells; None when it is dropped."""
        iid = _instance_id(self.repo_name, commit)
        t0 = time.perf_counter()
        try:
            language = self.language(commit)
        except (UnknownLanguage, RecipeError) as exc:
            self.drop(commit, iid, "split", str(exc))
            return None
        found = split_commit(self.repo, commit, language, code_only_ok=self.args.code_only_ok)
        if isinstance(found, Skipped):
            self.seconds["split"] += time.perf_counter() - t0
            self.drop(commit, iid, "split", found.reason)
            return None
        self.counts["candidates"] += 1
        flags: list[str] = []
        keep = self.judged(found, iid, before_build(self.repo, found, self.policy), flags)
        self.seconds["split"] += time.perf_counter() - t0
        return (found, language, iid, flags) if keep else None

    def build_and_validate(self, cand: Candidate, language: Any, iid: str, flags: list[str]) -> str:
        """Build, validate and judge one candidate (in a worker thread); the word is its status."""
        image = self.args.image_template.format(id=iid.lower())
        env = None
        if self.envs is not None:
            t0 = time.perf_counter()
            try:
                recipe = recipe_for(self.repo, cand.parent, language.name, self.args.recipe, detected=True)
                env = self.envs.task_env(cand.parent, language.name, recipe)
            except (EnvFailed, EnvUnavailable, RecipeError, OSError) as exc:
                self.drop(cand.commit, iid, "env", str(exc))
                return "dropped"
            finally:
                self.add(self.seconds, "env", time.perf_counter() - t0)
        t0 = time.perf_counter()
        try:
            base = build_task_image(
                self.repo, cand.parent, language, image, iid, timeout=self.args.timeout, env=env
            )
        except (BuildFailed, OSError) as exc:
            self.drop(cand.commit, iid, "build", str(exc))
            return "dropped"
        except subprocess.TimeoutExpired:
            self.drop(cand.commit, iid, "build", f"the build took more than {self.args.timeout:.0f} s")
            return "dropped"
        finally:
            self.add(self.seconds, "build", time.perf_counter() - t0)
        self.count("built")
        t0 = time.perf_counter()
        try:
            found = validate(
                language, cand, image, base, name_prefix=self.args.name_prefix, timeout=self.args.timeout
            )
        except NoFailToPass as exc:
            self.drop(cand.commit, iid, "validate", str(exc))
            return "dropped"
        except subprocess.TimeoutExpired:
            self.drop(cand.commit, iid, "validate", f"a test run took more than {self.args.timeout:.0f} s")
            return "dropped"
        finally:
            self.add(self.seconds, "validate", time.perf_counter() - t0)
        f2p, p2p = found["fail_to_pass"], found["pass_to_pass"]
        if not self.judged(cand, iid, after_validation(f2p, p2p, found["before"], self.policy), flags):
            return "dropped"
        self.count("validated")
        statement, source = write_statement(
            self.statements, cand, language, f2p, p2p, test_section(found["logs"]["before"])
        )
        extra: dict[str, Any] = {"statement_source": source}
        provenance = split_provenance(cand.message)[1]
        if provenance:
            extra["provenance"] = provenance
        if flags:
            extra["policy_flags"] = flags
        if env is not None:
            extra["env_image"] = env.image
        row = task_row(
            repo_name=self.repo_name, instance_id=iid, language=language, candidate=cand, image=image,
            base_commit=base, fail_to_pass=f2p, pass_to_pass=p2p, problem_statement=statement, extra=extra,
        )  # fmt: skip
        with self.lock:
            _append(self.validated, row)
        return "validated"

    def certify(self) -> None:
        """Certify the validated rows not yet decided; certified → output, the others → drops."""
        from swe_rl.eval import certify
        from swe_rl.eval.grading_hooks import run_graders
        from swe_rl.grading.certification import read_ledger

        decided = {r["instance_id"] for r in _read_jsonl(self.output)} | {
            r["instance_id"] for r in _read_jsonl(self.drops)
        }
        pending = [r for r in _read_jsonl(self.validated) if r["instance_id"] not in decided]
        if not pending:
            return
        t0 = time.perf_counter()
        todo = self.output.with_suffix(".certify-input.jsonl")
        todo.write_text("".join(json.dumps(r) + "\n" for r in pending))
        argv = ["run", "--data", str(todo), "--ledger", str(self.ledger), "--runs", str(self.args.runs),
                "--max-concurrent", str(self.args.certify_concurrency), "--eval-timeout", str(self.args.timeout), "--no-progress"]  # fmt: skip
        args = certify.parse_args(argv)
        if self.pool_env is not None:  # a fleet the caller runs
            asyncio.run(certify.run(args, self.pool_env))
        else:  # a local one started here, or the pool the environment names
            run_graders(lambda *env: certify.run(args, *env), local_fleet=self.args.local_fleet,
                        max_concurrent=self.args.certify_concurrency, networks=[])  # fmt: skip
        todo.unlink()
        ledger = read_ledger(self.ledger)
        for row in pending:
            entry = ledger.entries.get(row["instance_id"])
            if entry is None or entry.env_error:
                continue  # the fleet failed: tried again on the next run, never a drop
            if entry.certified:
                _append(self.output, row)
                self.counts["certified"] += 1
            else:
                self.drop(row["mined_commit"], row["instance_id"], "certify", entry.reason)
        self.seconds["certify"] += time.perf_counter() - t0

    def run(self) -> dict[str, Any]:
        self.output.parent.mkdir(parents=True, exist_ok=True)
        done = {r.get("mined_commit") for r in _read_jsonl(self.output)}
        done |= {r.get("commit") for r in _read_jsonl(self.drops)}
        done |= {r.get("mined_commit") for r in _read_jsonl(self.validated)}
        commits = [c for c in commits_in_range(self.repo, self.args.rev_range) if c not in done]
        if self.args.limit is not None:
            commits = commits[: self.args.limit]
        t_start = time.perf_counter()
        bar = StatusBar(len(commits), disabled=self.args.no_progress, use_tqdm=sys.stdout.isatty())
        todo = []
        for commit in commits:  # git only: quick, one at a time
            self.counts["commits"] += 1
            found = self.split(commit)
            if found is None:
                bar.update("dropped")
            else:
                todo.append(found)
        with ThreadPoolExecutor(max_workers=max(1, self.args.jobs)) as pool:
            futures = [pool.submit(self.build_and_validate, *item) for item in todo]
            for future in as_completed(futures):
                bar.update(future.result())
        bar.close()
        if not self.args.no_certify:
            self.certify()
        stats = {
            "counts": self.counts,
            "seconds": {k: round(v, 1) for k, v in self.seconds.items()},
            "wall_seconds": round(time.perf_counter() - t_start, 1),
            "jobs": self.args.jobs,
            "certify_concurrency": self.args.certify_concurrency,
        }
        self.stats_path.write_text(json.dumps(stats, indent=1) + "\n")
        return stats


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if not (args.repo / ".git").exists() and not (args.repo / "HEAD").exists():
        print(f"error: {args.repo} is not a git repository", file=sys.stderr)
        return 2
    if args.images_for is not None:
        return build_images_for(args)
    if "{id}" not in args.image_template:
        print("error: --image-template must contain {id}", file=sys.stderr)
        return 2
    if args.recipe is not None:
        try:
            load_recipe(args.recipe.read_text(), where=str(args.recipe))
        except (OSError, RecipeError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
    if args.jobs < 1 or args.certify_concurrency < 1:
        print("error: --jobs and --certify-concurrency must be at least 1", file=sys.stderr)
        return 2
    if args.statement == "model" and not args.statement_model_url:
        print("error: --statement model needs --statement-model-url", file=sys.stderr)
        return 2
    stats = Miner(args).run()
    c, s = stats["counts"], stats["seconds"]
    print(
        f"mined {c['commits']} commit(s): {c['candidates']} candidates -> {c['built']} built -> "
        f"{c['validated']} validated -> {c['certified']} certified; seconds: "
        + ", ".join(f"{k} {v}" for k, v in s.items())
        + f" (summed over {args.jobs} worker(s)); wall {stats['wall_seconds']} s"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
