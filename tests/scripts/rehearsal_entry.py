"""The train script the launch's rehearsal submits as its Ray job (tests/scripts/test_launch_rehearsal.py).

Copied into SLIME_DIR as TRAIN_SCRIPT, so `ray job submit` runs it exactly where slime's
``train_async.py`` would run, with the argument list and runtime environment the launch built. It proves
what a CPU machine can prove, and writes it as JSON to ``$SWE_REHEARSAL_OUT`` (a SWE_* name: that it
arrives at all shows the launch forwards the user's SWE_* variables):

- ``argv``: the full argument list the job received; ``env``: the variables the test asks about;
- ``pool``: the pool server the head started answers ``/status`` with the token the job was given (and
  refuses a wrong one), with the fleet's exec servers as its nodes;
- ``slime``: when ``SWE_REHEARSAL_SLIME=1`` (slime's and Megatron's source at the pins on PYTHONPATH),
  slime's own ``parse_args`` on that list: Megatron's argument parser and validation, slime's and the
  HF config check, run for real; only SGLang's server and router argument classes are stubbed (SGLang
  does not install on a CPU machine): they add the few ``--sglang-*`` flags slime's validation reads;
  ``wandb`` is an empty module (slime's logging imports it); Megatron's one GPU query in its validation
  (the device's compute capability) answers 9 (Hopper).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import types
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any


def pool_status(token: str) -> dict[str, Any]:
    url = os.environ["SWE_POOL_URL"].rstrip("/") + "/status"

    def get(bearer: str) -> tuple[int, Any]:
        req = urllib.request.Request(url, headers={"Authorization": f"Bearer {bearer}"})
        try:
            with urllib.request.urlopen(req, timeout=60) as resp:
                return resp.status, json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            return exc.code, None

    code, body = get(token)
    wrong, _ = get(token + "-wrong")
    return {"status": code, "body": body, "wrong_token_status": wrong}


def stub_sglang() -> None:
    """SGLang's ServerArgs / RouterArgs, reduced to the flags slime's parse and validation read."""

    class ServerArgs:
        @staticmethod
        def add_cli_args(parser: argparse.ArgumentParser) -> None:
            parser.add_argument("--mem-fraction-static", type=float, default=None)
            for name in ("dp-size", "pp-size", "ep-size", "moe-dp-size"):
                parser.add_argument(f"--{name}", type=int, default=1)
            parser.add_argument("--enable-dp-attention", action="store_true")

    class RouterArgs:
        @staticmethod
        def add_cli_args(parser: argparse.ArgumentParser, **_: Any) -> None:
            return None

    for name, attrs in {
        "sglang": {},
        "sglang.srt": {},
        "sglang.srt.server_args": {"ServerArgs": ServerArgs},
        "sglang_router": {},
        "sglang_router.launch_router": {"RouterArgs": RouterArgs},
        "wandb": {},  # slime's tracking, imported by its logging module; not used by the parse
    }.items():
        module = types.ModuleType(name)
        module.__dict__.update(attrs)
        sys.modules[name] = module


def slime_parse(argv: list[str]) -> dict[str, Any]:
    stub_sglang()
    sys.argv = ["train_async.py", *argv]
    import megatron.training.arguments as megatron_arguments
    from slime.utils.arguments import parse_args

    # the one GPU query of Megatron's validation: the device's compute capability (9: Hopper)
    megatron_arguments.get_device_arch_version = lambda: 9  # type: ignore[attr-defined]

    args = parse_args()
    keys = ("num_layers", "hidden_size", "hf_checkpoint", "prompt_data", "custom_generate_function_path")
    return {"parsed": {k: getattr(args, k, None) for k in keys}, "sglang_tp_size": args.sglang_tp_size}


def main() -> None:
    argv = sys.argv[1:]
    out = Path(os.environ["SWE_REHEARSAL_OUT"])
    report: dict[str, Any] = {"argv": argv, "cwd": os.getcwd()}
    names = (
        "WANDB_API_KEY",
        "SWE_PRM_URL",
        "SWE_POOL_URL",
        "SWE_SAVE_TRAJ_DIR",
        "SWE_MAX_CONCURRENT",
        "PYTHONPATH",
    )
    report["env"] = {k: os.environ.get(k) for k in names}
    token = os.environ.get("SWE_POOL_TOKEN") or Path(os.environ["SWE_POOL_TOKEN_FILE"]).read_text().strip()
    report["pool"] = pool_status(token)
    out.write_text(json.dumps(report))  # what is proved so far survives a failing parse
    if os.environ.get("SWE_REHEARSAL_SLIME") == "1":
        report["slime"] = slime_parse(argv)
        out.write_text(json.dumps(report, default=str))


if __name__ == "__main__":
    main()
