"""data/pull_swe_images.sh: which images it pulls, how it retries, proxies, and reports.

No image registry is reachable from the test machines, so most tests put a stand-in
``docker`` executable first on PATH: a stub of the docker *CLI* only, which logs every
call and simulates pulls that succeed, fail, or fail a few times before succeeding
(``FAKE_DOCKER_PLAN``), and remembers which images are present. The script itself runs
unmodified under bash. The last tests use the real Docker daemon: a local image must be
reported present without any pull, and a pull from an unreachable registry must fail,
be retried and be listed in ``failed_images.txt``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from row_factories import DATA, FIXTURE_INSTANCES, run_tool, write_jsonl

pytestmark = pytest.mark.slow  # bash and a stub docker CLI per test: seconds

SCRIPT = DATA / "pull_swe_images.sh"

FAKE_DOCKER = r'''#!@PYTHON@
"""Stand-in docker CLI: image inspect / pull / tag / rmi against a state directory."""
import fcntl, json, os, sys, time

state = os.environ["FAKE_DOCKER_STATE"]
args = sys.argv[1:]
lock = open(os.path.join(state, "lock"), "w")


def present():
    path = os.path.join(state, "present.txt")
    return set(open(path).read().split()) if os.path.exists(path) else set()


def save(images):
    with open(os.path.join(state, "present.txt"), "w") as fh:
        fh.write("".join(i + "\n" for i in sorted(images)))


def log(**extra):
    with open(os.path.join(state, "calls.jsonl"), "a") as fh:
        fh.write(json.dumps({"args": args, **extra}) + "\n")


start = time.time()
if args[:2] == ["image", "inspect"]:
    fcntl.flock(lock, fcntl.LOCK_EX)
    found = args[2] in present()
    log()
    sys.exit(0 if found else 1)
if args[0] == "pull":
    ref = args[1]
    plan = json.loads(os.environ.get("FAKE_DOCKER_PLAN", "{}")).get(ref, 0)
    time.sleep(float(os.environ.get("FAKE_DOCKER_PULL_SECONDS", "0")))
    fcntl.flock(lock, fcntl.LOCK_EX)
    counter = os.path.join(state, "attempts-" + ref.replace("/", "_").replace(":", "_"))
    attempt = int(open(counter).read()) + 1 if os.path.exists(counter) else 1
    open(counter, "w").write(str(attempt))
    ok = plan != "fail" and attempt > int(plan)
    log(start=start, end=time.time(), ok=ok)
    if not ok:
        print(f"Error response from daemon: simulated failure of {ref} (attempt {attempt})", file=sys.stderr)
        sys.exit(1)
    print(f"{ref.rsplit(':', 1)[-1]}: Pulling from {ref}\nStatus: Downloaded newer image for {ref}")
    save(present() | {ref})
    sys.exit(0)
fcntl.flock(lock, fcntl.LOCK_EX)
log()
if args[0] == "tag":
    images = present()
    if args[1] not in images:
        print(f"Error response from daemon: No such image: {args[1]}", file=sys.stderr)
        sys.exit(1)
    save(images | {args[2]})
    sys.exit(0)
if args[0] == "rmi":
    save(present() - {args[1]})
    print(f"Untagged: {args[1]}")
    sys.exit(0)
print(f"fake docker: unsupported {args}", file=sys.stderr)
sys.exit(2)
'''


class FakeDocker:
    """The stand-in docker CLI and its state (present images, plan, call log)."""

    def __init__(self, root: Path) -> None:
        self.bin = root / "bin"
        self.state = root / "state"
        self.bin.mkdir(parents=True)
        self.state.mkdir(parents=True)
        exe = self.bin / "docker"
        exe.write_text(FAKE_DOCKER.replace("@PYTHON@", sys.executable))
        exe.chmod(0o755)
        self.plan: dict[str, object] = {}
        self.pull_seconds = 0.0

    def set_present(self, *images: str) -> None:
        (self.state / "present.txt").write_text("".join(f"{i}\n" for i in images))

    def present(self) -> set[str]:
        path = self.state / "present.txt"
        return set(path.read_text().split()) if path.exists() else set()

    def calls(self, verb: str | None = None) -> list[dict]:
        path = self.state / "calls.jsonl"
        calls = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
        return [c for c in calls if verb is None or c["args"][0] == verb]

    def pulled_refs(self) -> list[str]:
        return [c["args"][1] for c in self.calls("pull")]

    def env(self) -> dict[str, str]:
        return {
            "PATH": f"{self.bin}:{os.environ['PATH']}",
            "FAKE_DOCKER_STATE": str(self.state),
            "FAKE_DOCKER_PLAN": json.dumps(self.plan),
            "FAKE_DOCKER_PULL_SECONDS": str(self.pull_seconds),
        }


@pytest.fixture
def fake(tmp_path) -> FakeDocker:
    return FakeDocker(tmp_path / "fake")


def pull(cwd: Path, env: dict[str, str], timeout: float = 60) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if k not in {"IMAGE_LIST", "TRAIN", "N", "DRY_RUN"}}
    base["BACKOFF"] = "0"
    return subprocess.run(["bash", str(SCRIPT)], check=False, cwd=cwd, env={**base, **env},
                          capture_output=True, text=True, timeout=timeout)  # fmt: skip


def image_list(tmp_path: Path, text: str) -> str:
    path = tmp_path / "images.txt"
    path.write_text(text)
    return str(path)


def summary(proc: subprocess.CompletedProcess) -> str:
    return next(line for line in proc.stdout.splitlines() if line.startswith("summary: "))


# ---------------------------------------------------------------------------- with the CLI stub


def test_pulls_missing_images_retries_flaky_ones_and_lists_failures(tmp_path, fake):
    fake.set_present("local/present:1")
    fake.plan = {"reg/flaky:1": 2, "reg/broken:1": "fail"}
    images = image_list(tmp_path, "# images to pull\nreg/ok:1\nlocal/present:1\n\n  reg/flaky:1  \n"
                                  "reg/broken:1\nreg/ok:1  # again\nreg/ok2:1\n")  # fmt: skip
    proc = pull(tmp_path, {**fake.env(), "IMAGE_LIST": images, "CONCURRENCY": "2", "RETRIES": "3"})

    assert proc.returncode == 1, proc.stderr
    assert summary(proc) == "summary: 5 image(s): 3 pulled, 1 present, 1 failed"
    assert (tmp_path / "failed_images.txt").read_text() == "reg/broken:1\n"
    pulls = fake.pulled_refs()
    assert sorted(pulls) == sorted(["reg/ok:1", "reg/ok2:1"] + ["reg/flaky:1"] * 3 + ["reg/broken:1"] * 3)
    assert "local/present:1" not in pulls
    assert fake.present() == {"local/present:1", "reg/ok:1", "reg/ok2:1", "reg/flaky:1"}
    assert "[present] local/present:1" in proc.stdout
    assert "[pulled] reg/flaky:1 (attempt 3)" in proc.stdout
    assert (
        "[retry] reg/flaky:1: attempt 1 failed (Error response from daemon: simulated failure" in proc.stderr
    )
    assert "[failed] reg/broken:1 after 3 attempt(s)" in proc.stderr
    assert "retry with IMAGE_LIST=failed_images.txt" in proc.stderr


def test_all_pulled_exits_zero_and_empties_the_failed_list(tmp_path, fake):
    (tmp_path / "failed_images.txt").write_text("stale/entry:1\n")
    proc = pull(tmp_path, {**fake.env(), "IMAGE_LIST": image_list(tmp_path, "a/b:1\nc/d:2\n")})
    assert proc.returncode == 0, proc.stderr
    assert summary(proc) == "summary: 2 image(s): 2 pulled, 0 present, 0 failed"
    assert (tmp_path / "failed_images.txt").read_text() == ""
    # Second run: everything is there already.
    proc = pull(tmp_path, {**fake.env(), "IMAGE_LIST": str(tmp_path / "images.txt")})
    assert summary(proc) == "summary: 2 image(s): 0 pulled, 2 present, 0 failed"
    assert len(fake.pulled_refs()) == 2


def test_backoff_doubles_between_attempts(tmp_path, fake):
    fake.plan = {"reg/flaky:1": 2}
    # an injected clock: a `sleep` first on PATH records how long the script waits, and returns at once
    slept = tmp_path / "slept.txt"
    (fake.bin / "sleep").write_text('#!/bin/sh\necho "$1" >> "$FAKE_SLEEP_LOG"\n')
    (fake.bin / "sleep").chmod(0o755)
    proc = pull(
        tmp_path,
        {
            **fake.env(),
            "IMAGE_LIST": image_list(tmp_path, "reg/flaky:1\n"),
            "BACKOFF": "1",
            "FAKE_SLEEP_LOG": str(slept),
        },
    )
    assert proc.returncode == 0, proc.stderr
    assert "attempt 1 failed" in proc.stderr and "retrying in 1s" in proc.stderr
    assert "attempt 2 failed" in proc.stderr and "retrying in 2s" in proc.stderr
    assert slept.read_text().split() == ["1", "2"]
    assert len(fake.calls("pull")) == 3


def test_train_jsonl_images_and_first_n(tmp_path, fake):
    train_dir = tmp_path / "data"
    conv = run_tool(
        "preprocess_swe_dataset.py", "--train-data-source", FIXTURE_INSTANCES, "--output-dir", train_dir
    )
    assert conv.returncode == 0, conv.stderr
    train = train_dir / "train.jsonl"
    rows = [json.loads(line) for line in train.read_text().splitlines()]
    images = [r["metadata"]["instance"]["image_name"] for r in rows]

    proc = pull(tmp_path, {**fake.env(), "TRAIN": str(train), "N": "2", "CONCURRENCY": "1"})
    assert proc.returncode == 0, proc.stderr
    assert fake.pulled_refs() == images[:2]
    assert summary(proc) == "summary: 2 image(s): 2 pulled, 0 present, 0 failed"

    # Rows without an image name are warned about and skipped; metadata may be a JSON string.
    odd = write_jsonl(tmp_path / "odd.jsonl", [
        {"text": "x", "metadata": json.dumps({"instance": {"image_name": "odd/one:1"}})},
        {"text": "no image", "metadata": {"instance": {"instance_id": "a"}}},
        "{not json",
        {"text": "dup", "metadata": {"instance": {"image_name": "odd/one:1"}}},
        {"instance_id": "flat", "image_name": "flat/row:1"},
    ])  # fmt: skip
    proc = pull(tmp_path, {**fake.env(), "TRAIN": str(odd)})
    assert proc.returncode == 0, proc.stderr
    assert summary(proc) == "summary: 2 image(s): 2 pulled, 0 present, 0 failed"
    assert "line 2: no metadata.instance.image_name" in proc.stderr and "line 3" in proc.stderr
    assert "2 row(s) without an image name skipped" in proc.stderr


def test_proxy_prefix_pulls_from_the_mirror_and_keeps_the_original_name(tmp_path, fake):
    images = image_list(tmp_path, "swebench/sweb.eval.x86_64.a_1776_b-1:latest\n"
                                  "docker.io/swebench/sweb.eval.x86_64.c_1776_d-2:latest\nother/img:1\n")  # fmt: skip
    env = {**fake.env(), "IMAGE_LIST": images, "SRC_PREFIX": "docker.io/swebench",
           "PROXY_PREFIX": "mirror.local:5000/swebench/"}  # fmt: skip
    proc = pull(tmp_path, env)
    assert proc.returncode == 0, proc.stderr
    assert sorted(fake.pulled_refs()) == [
        "mirror.local:5000/swebench/sweb.eval.x86_64.a_1776_b-1:latest",
        "mirror.local:5000/swebench/sweb.eval.x86_64.c_1776_d-2:latest",
        "other/img:1",
    ]
    assert sorted(c["args"][1:] for c in fake.calls("tag")) == [
        ["mirror.local:5000/swebench/sweb.eval.x86_64.a_1776_b-1:latest", "swebench/sweb.eval.x86_64.a_1776_b-1:latest"],
        ["mirror.local:5000/swebench/sweb.eval.x86_64.c_1776_d-2:latest",
         "docker.io/swebench/sweb.eval.x86_64.c_1776_d-2:latest"],
    ]  # fmt: skip
    # Only the original names remain: the proxy tags are removed.
    assert fake.present() == {
        "swebench/sweb.eval.x86_64.a_1776_b-1:latest",
        "docker.io/swebench/sweb.eval.x86_64.c_1776_d-2:latest",
        "other/img:1",
    }
    assert "(from mirror.local:5000/swebench/sweb.eval.x86_64.a_1776_b-1:latest)" in proc.stdout


def test_dry_run_prints_the_commands_and_changes_nothing(tmp_path, fake):
    fake.set_present("have/it:1")
    images = image_list(tmp_path, "have/it:1\nswebench/x:1\n")
    env = {
        **fake.env(),
        "IMAGE_LIST": images,
        "DRY_RUN": "1",
        "SRC_PREFIX": "swebench",
        "PROXY_PREFIX": "m:5000/sb",
    }
    proc = pull(tmp_path, env)
    assert proc.returncode == 0, proc.stderr
    assert (
        "+ docker pull m:5000/sb/x:1\n+ docker tag m:5000/sb/x:1 swebench/x:1\n+ docker rmi m:5000/sb/x:1\n"
        in proc.stdout
    )
    assert summary(proc) == "summary: 2 image(s): 1 to pull, 1 present, 0 failed (dry run: nothing is pulled)"
    assert {c["args"][0] for c in fake.calls()} == {"image"}  # presence checks only
    assert fake.present() == {"have/it:1"}


def test_pulls_run_in_parallel_up_to_concurrency(tmp_path, fake):
    fake.pull_seconds = 0.8
    images = image_list(tmp_path, "".join(f"r/img{i}:1\n" for i in range(4)))

    def max_overlap() -> int:
        spans = [(c["start"], c["end"]) for c in fake.calls("pull")]
        return max(sum(1 for s, e in spans if s <= start < e) for start, _ in spans)

    proc = pull(tmp_path, {**fake.env(), "IMAGE_LIST": images, "CONCURRENCY": "4"})
    assert proc.returncode == 0, proc.stderr
    assert max_overlap() >= 3
    (fake.state / "calls.jsonl").unlink()
    fake.set_present()
    proc = pull(tmp_path, {**fake.env(), "IMAGE_LIST": images, "CONCURRENCY": "2"})
    assert proc.returncode == 0, proc.stderr
    assert max_overlap() <= 2 and len(fake.pulled_refs()) == 4


@pytest.mark.parametrize(
    ("env", "needle"),
    [
        ({}, "set IMAGE_LIST"),
        ({"IMAGE_LIST": "/nonexistent/list.txt"}, "is not a file"),
        ({"IMAGE_LIST": "LIST", "CONCURRENCY": "0"}, "CONCURRENCY must be at least 1"),
        ({"IMAGE_LIST": "LIST", "RETRIES": "x"}, "RETRIES must be at least 1"),
        ({"IMAGE_LIST": "LIST", "N": "-1"}, "N must be a whole number"),
        ({"IMAGE_LIST": "LIST", "SRC_PREFIX": "docker.io/swebench"}, "SRC_PREFIX and PROXY_PREFIX together"),
        ({"IMAGE_LIST": "LIST", "DOCKER": "no-such-docker"}, "'no-such-docker' not found"),
        ({"IMAGE_LIST": "EMPTY"}, "no image names found"),
    ],
)
def test_bad_settings_exit_2_with_a_message(tmp_path, fake, env, needle):
    (tmp_path / "LIST").write_text("a/b:1\n")
    (tmp_path / "EMPTY").write_text("# nothing\n\n")
    env = {k: str(tmp_path / v) if v in {"LIST", "EMPTY"} else v for k, v in env.items()}
    proc = pull(tmp_path, {**fake.env(), **env})
    assert proc.returncode == 2 and needle in proc.stderr, proc.stderr
    assert fake.pulled_refs() == []


def test_export_then_pull_dry_run(tmp_path, fake):
    rows = write_jsonl(tmp_path / "v.jsonl", [{"instance_id": "django__django-11099", "repo": "django/django",
                                               "problem_statement": "x", "FAIL_TO_PASS": ["t"]}])  # fmt: skip
    conv = run_tool("export_swebench_verified_assets.py", "--dataset", rows, "--output-dir", tmp_path / "v")
    assert conv.returncode == 0, conv.stderr
    proc = pull(
        tmp_path, {**fake.env(), "IMAGE_LIST": str(tmp_path / "v" / "docker_images.txt"), "DRY_RUN": "1"}
    )
    assert "+ docker pull swebench/sweb.eval.x86_64.django_1776_django-11099:latest" in proc.stdout


# ---------------------------------------------------------------------------- real Docker daemon


def logging_docker(tmp_path: Path) -> tuple[str, Path]:
    """A wrapper that records each docker call, then runs the real docker CLI."""
    log = tmp_path / "docker-calls.log"
    real = shutil.which("docker")
    assert real, "docker CLI missing"
    wrapper = tmp_path / "docker-logged"
    wrapper.write_text(f'#!/usr/bin/env bash\necho "$*" >> "{log}"\nexec "{real}" "$@"\n')
    wrapper.chmod(0o755)
    return str(wrapper), log


def test_local_image_on_the_real_daemon_is_present_and_not_pulled(tmp_path, base_image):
    docker, log = logging_docker(tmp_path)
    images = image_list(tmp_path, f"{base_image}\n{base_image}\n")
    proc = pull(tmp_path, {"IMAGE_LIST": images, "DOCKER": docker})
    assert proc.returncode == 0, proc.stderr
    assert summary(proc) == "summary: 1 image(s): 0 pulled, 1 present, 0 failed"
    assert f"[present] {base_image}" in proc.stdout
    assert log.read_text().splitlines() == [f"image inspect {base_image}"]
    assert (tmp_path / "failed_images.txt").read_text() == ""


def test_unreachable_registry_on_the_real_daemon_fails_and_is_listed(tmp_path, base_image):
    missing = "127.0.0.1:9/swe-rl-test/missing:1"  # port 9 (discard): nothing listens
    docker, log = logging_docker(tmp_path)
    images = image_list(tmp_path, f"{base_image}\n{missing}\n")
    env = {"IMAGE_LIST": images, "DOCKER": docker, "RETRIES": "2", "FAILED_FILE": str(tmp_path / "f.txt")}
    proc = pull(tmp_path, env)
    assert proc.returncode == 1
    assert summary(proc) == "summary: 2 image(s): 0 pulled, 1 present, 1 failed"
    assert (tmp_path / "f.txt").read_text() == f"{missing}\n"
    assert log.read_text().splitlines().count(f"pull {missing}") == 2
    assert f"[failed] {missing} after 2 attempt(s)" in proc.stderr


def test_with_a_pool_url_the_list_goes_to_the_pools_prefetch_and_nothing_is_pulled(tmp_path, fake):
    import http.server
    import threading

    seen: list[tuple[str, str, dict]] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            seen.append((self.path, self.headers.get("Authorization", ""), body))
            answer = json.dumps(
                {"ok": True, "images": 2, "nodes": {"http://n1": ["a/b:1", "c/d:2"]}}
            ).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        env = {
            **fake.env(),
            "IMAGE_LIST": image_list(tmp_path, "a/b:1\nc/d:2\na/b:1\n"),
            "SWE_POOL_URL": f"http://127.0.0.1:{server.server_address[1]}/",
            "SWE_POOL_TOKEN": "tok",
        }
        proc = pull(tmp_path, env)
    finally:
        server.shutdown()
        server.server_close()
    assert proc.returncode == 0, proc.stderr
    assert seen == [("/prefetch", "Bearer tok", {"images": ["a/b:1", "c/d:2"]})]
    assert "2 pull(s) asked of 1 node(s)" in proc.stdout
    assert fake.pulled_refs() == []
