"""Clean the git history of task images once, so that agent containers only pay the cheap check.

Episode start runs `swe_rl.agent.git_hygiene` in every agent container: on a clean image that is two
object listings, on an image carrying future history it is one ``git gc --prune=now`` per
container. This script does the clean-up once per image on a Docker node: it runs the same
script in a container of the image and, when anything was removed, commits the result under
the same tag (or ``--suffix``), keeping the image's configuration. Run it after pulling images.

    python data/clean_image_history.py swebench/sweb.eval.x86_64.django_1776_django-11099:latest ...
    python data/clean_image_history.py --from-file images.txt --workdir /testbed
"""

from __future__ import annotations

import argparse
from pathlib import Path

from swe_rl.agent.git_hygiene import hygiene_body


def clean_image(client, image: str, workdir: str = "/testbed", suffix: str = "") -> str:
    """Clean one image; returns what happened (``clean``, ``cleaned -> <tag>``, or the error)."""
    container = client.containers.run(
        image,
        ["sleep", "infinity"],
        detach=True,
        network_mode="none",
        labels={"swe-rl.tool": "clean-image-history"},
    )
    try:
        code, out = container.exec_run(["bash", "-c", hygiene_body(workdir)])
        text = out.decode(errors="replace").strip()
        line = next((x for x in text.splitlines() if x.startswith("swe-git-hygiene:")), "")
        if code != 0 or not line:
            return f"failed (exit {code}): {text[-300:]}"
        if "skipped=" in line or (
            "refs_removed=0" in line and "remotes_removed=0" in line and "pruned=0" in line
        ):
            return f"clean ({line.split(':', 1)[1].strip()})"
        repo, _, tag = image.rpartition(":") if ":" in image.rsplit("/", 1)[-1] else (image, "", "latest")
        original = client.images.get(image).attrs["Config"]
        container.commit(
            repository=repo,
            tag=tag + suffix,
            conf={"Cmd": original.get("Cmd")},
            message="git history beyond the base commit removed (swe-rl)",
        )
        return f"cleaned -> {repo}:{tag + suffix} ({line.split(':', 1)[1].strip()})"
    finally:
        container.remove(force=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("images", nargs="*")
    p.add_argument("--from-file", type=Path, help="one image per line")
    p.add_argument("--workdir", default="/testbed")
    p.add_argument("--suffix", default="", help="tag suffix of the cleaned image (default: replace the tag)")
    args = p.parse_args(argv)
    images = list(args.images)
    if args.from_file:
        images += [x.strip() for x in args.from_file.read_text().splitlines() if x.strip()]
    if not images:
        p.error("no images given")
    import docker

    client = docker.from_env()
    failed = 0
    for image in images:
        status = clean_image(client, image, args.workdir, args.suffix)
        failed += status.startswith("failed")
        print(f"{image}: {status}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
