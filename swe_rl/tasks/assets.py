"""Binary files a text patch cannot carry (a row's ``image_assets``), staged into the eval script.

swebench 5.x rows list them as ``{"test_patch": [{"path", "url"}], "patch": [...]}`` (rendering
baselines such as ``expected.png``). As in 5.x they land in the work tree after the test patch is
applied and before the tests start, so they come with the patch, never baked into the image. The
bytes travel inside the script (base64 in a here-document): the grading container needs no network.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import shlex
import urllib.request
from pathlib import Path

from swe_rl.tasks.eval_scripts import START_TEST_OUTPUT
from swe_rl.tasks.instance import TaskInstance

__all__ = ["declared_assets", "fetch_assets", "with_assets"]

log = logging.getLogger(__name__)


def declared_assets(instance: TaskInstance) -> list[dict[str, str]]:
    """The row's assets (test patch's first, then the patch's) that name a path."""
    found = []
    for key in ("test_patch", "patch"):
        for entry in instance.image_assets.get(key) or []:
            if isinstance(entry, dict) and entry.get("path"):
                found.append({"path": str(entry["path"]), "url": str(entry.get("url") or "")})
    return found


def fetch_assets(
    instance: TaskInstance, mirror: Path | None = None, timeout: float = 60.0
) -> dict[str, bytes]:
    """path -> bytes: from ``mirror/<instance_id>/<path>`` when there, else the url (skipped, logged, on failure)."""
    out: dict[str, bytes] = {}
    for asset in declared_assets(instance):
        local = mirror / instance.instance_id / asset["path"] if mirror else None
        if local is not None and local.is_file():
            out[asset["path"]] = local.read_bytes()
            continue
        if not asset["url"]:
            log.warning("%s: no source for asset %s", instance.instance_id, asset["path"])
            continue
        try:
            with urllib.request.urlopen(asset["url"], timeout=timeout) as resp:
                out[asset["path"]] = resp.read()
        except (OSError, ValueError) as exc:
            log.warning("%s: could not fetch asset %s: %s", instance.instance_id, asset["url"], exc)
    return out


def with_assets(script: str, assets: dict[str, bytes]) -> str:
    """The script with commands writing each asset inserted before the test-output start marker."""
    if not assets:
        return script
    commands = []
    for path, data in assets.items():
        quoted = shlex.quote(path)
        end = f"EOF_SWE_ASSET_{hashlib.sha256(data).hexdigest()[:16]}"
        commands.append(f"mkdir -p \"$(dirname {quoted})\" && base64 -d > {quoted} <<'{end}'")
        commands.append(base64.encodebytes(data).decode().rstrip("\n"))
        commands.append(end)
    lines = script.split("\n")
    for i, line in enumerate(lines):
        if START_TEST_OUTPUT in line:
            return "\n".join([*lines[:i], *commands, *lines[i:]])
    return script.rstrip("\n") + "\n" + "\n".join(commands) + "\n"
