"""The launch's dry-run checks that need Python: run by ``scripts/lib/launch_checks.sh`` on the head.

``python -m swe_rl.slime.launch_check -- <slime's full argument list>`` prints one line per problem,
``NAME<TAB>message`` (NAME: the launch setting to fix), and exits 0 either way; the shell side adds
each line to the launch's one report. What it checks, all read from the argument list itself:

- the plugin's own refusals: `swe_rl.slime.runtime.check_options` on the arguments (parsed the way
  slime names them: ``--use-opsm`` -> ``args.use_opsm``, ``--disable-X`` -> ``args.X = False``) and the
  plugin config (``--custom-config-path``'s YAML set on ``args``, as slime does), so that a refusal the
  plugin would raise at its first rollout, after engines and Megatron are up, stops the launch instead.
  Whatever ``check_options`` refuses later is refused here without a change.
- ``--prompt-data`` / ``--eval-prompt-data``: slime JSONL whose first rows hold ``--input-key`` and an
  instance under ``--metadata-key`` (``metadata.instance``, read by `swe_rl.tasks.instance_from_row`).
- ``--hf-checkpoint``: weights, a tokenizer, and a ``config.json`` of the shape the model flags give.
- the top-level packages slime's train script imports on the head (`HEAD_MODULES`).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

ROWS_CHECKED = 20
HEAD_MODULES = {
    # train_async.py -> ray; slime.utils.arguments -> yaml, sglang.srt.server_args,
    # sglang_router.launch_router, megatron.training.arguments (torch), transformers.AutoConfig
    "ray": "pip install 'ray[default]' (the version slime's docker image has)",
    "yaml": "pip install pyyaml",
    "torch": "install slime's torch (third_party/training_stack.md)",
    "transformers": "pip install transformers (slime's requirements.txt)",
    "sglang": "install SGLang at the pin (third_party/training_stack.md)",
    "sglang_router": "pip install sglang-router (third_party/training_stack.md)",
}
# config.json key -> the Megatron flag scripts/models/<MODEL_NAME>.sh sets for it
SHAPE = {
    "num_hidden_layers": "--num-layers",
    "hidden_size": "--hidden-size",
    "num_attention_heads": "--num-attention-heads",
    "num_key_value_heads": "--num-query-groups",
    "head_dim": "--kv-channels",
    "vocab_size": "--vocab-size",
    "num_experts": "--num-experts",
    "moe_intermediate_size": "--moe-ffn-hidden-size",
    "num_experts_per_tok": "--moe-router-topk",
}
PLUGIN_GENERATE = {"swe_rl.slime.e2e.generate": True, "swe_rl.slime.pivot.generate": False}
"""The generate functions that call `check_options`, and their ``several`` argument."""


def parse_flags(argv: list[str]) -> dict[str, Any]:
    """slime's flags as attributes: ``--a-b`` alone -> True, with one value -> it, with more -> a list."""
    values: dict[str, Any] = {}
    key = None
    for word in argv:
        if word.startswith("--") and len(word) > 2:
            key = word[2:].replace("-", "_")
            values[key] = True
            if key.startswith("disable_"):
                values.setdefault(key[len("disable_") :], False)
        elif key is not None:
            old = values[key]
            values[key] = word if old is True else [*old, word] if isinstance(old, list) else [old, word]
    return values


def check_options(flags: dict[str, Any]) -> list[tuple[str, str]]:
    """The plugin's own refusals of slime's options, with the plugin config slime would load."""
    generate = flags.get("custom_generate_function_path")
    if generate not in PLUGIN_GENERATE:
        return []
    args = SimpleNamespace(**flags)
    try:
        import yaml

        from swe_rl.slime import runtime
        from swe_rl.slime.config import PluginConfig
    except ImportError as exc:
        return [
            ("PYTHON", f"the plugin cannot be imported on the head ({exc}): pip install -e . in this Python")
        ]
    path = flags.get("custom_config_path")
    if isinstance(path, str) and Path(path).is_file():
        for key, value in (yaml.safe_load(Path(path).read_text()) or {}).items():
            setattr(args, key, value)
    try:
        config = PluginConfig.from_args(args)
        runtime.check_options(args, config, evaluation=False, several=PLUGIN_GENERATE[generate])
    except ValueError as exc:
        return [("TRAIN_ARGS", f"the plugin refuses slime's arguments: {exc}")]
    return []


def check_rows(name: str, path: str, input_key: str, metadata_key: str) -> list[tuple[str, str]]:
    """The first rows of a prompt file: slime JSONL with the fields the plugin reads."""
    from swe_rl.tasks import RowInvalid, instance_from_row

    where = f"{name}={path}"
    fix = "convert the rows with swe-preprocess (docs/datasets.md)"
    try:
        with open(path, encoding="utf-8") as fh:
            lines = []
            for n, line in enumerate(fh, 1):
                if line.strip():
                    lines.append((n, line))
                if len(lines) == ROWS_CHECKED:
                    break
    except (OSError, UnicodeDecodeError) as exc:
        return [(name, f"{where} is not a readable UTF-8 text file ({exc}): slime reads JSONL")]
    if not lines:
        return [(name, f"{where} holds no rows: {fix}")]
    for n, line in lines:
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            return [(name, f"{where} line {n} is not JSON ({exc.msg}): slime reads JSONL, one object a line")]
        if not isinstance(row, dict):
            return [(name, f"{where} line {n} is not a JSON object")]
        meta = row.get(metadata_key)
        if isinstance(meta, str):
            try:
                meta = json.loads(meta)
            except json.JSONDecodeError:
                meta = None
        if not isinstance(meta, dict) or not ({"instance", "pivot"} & set(meta)):
            raw = " (a raw SWE row: instance_id at the top level)" if "instance_id" in row else ""
            return [
                (
                    name,
                    f"{where} line {n} has no '{metadata_key}.instance'{raw}: it is not slime JSONL; {fix}",
                )
            ]
        if input_key not in row:
            return [(name, f"{where} line {n} has no '{input_key}' (slime's --input-key): {fix}")]
        if "instance" in meta:
            try:
                instance_from_row({"metadata": meta})
            except RowInvalid as exc:
                return [(name, f"{where} line {n}: {exc}")]
    return []


def check_checkpoint(path: str, flags: dict[str, Any]) -> list[tuple[str, str]]:
    """Weights, a tokenizer and a config.json of the shape the model flags give."""
    folder, where = Path(path), f"HF_CKPT={path}"
    problems = []
    names = {p.name for p in folder.iterdir()}
    if not any(n.endswith((".safetensors", ".bin")) for n in names):
        problems.append(
            ("HF_CKPT", f"{where} has no weights (*.safetensors or *.bin): download the whole model")
        )
    if not names & {"tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json"}:
        problems.append(("HF_CKPT", f"{where} has no tokenizer (tokenizer.json / tokenizer_config.json)"))
    if "config.json" not in names:
        return problems  # the shell side reports it
    try:
        config = json.loads((folder / "config.json").read_text())
        config = config.get("text_config", config)
    except (OSError, ValueError) as exc:
        return [*problems, ("HF_CKPT", f"{where}: config.json is not readable JSON ({exc})")]
    if not {"hidden_size", "num_hidden_layers"} <= set(config):
        return [*problems, ("HF_CKPT", f"{where}: config.json has no hidden_size / num_hidden_layers")]
    wrong = []
    for key, flag in SHAPE.items():
        want, have = config.get(key), flags.get(flag[2:].replace("-", "_"))
        if want is None or (want == 0 and have is None):
            continue  # a key this config does not have (dense models have no num_experts)
        if have is None or str(want) != str(have):
            wrong.append(f"{key}={want} but {flag} {have if have is not None else '(not set)'}")
    if wrong:
        model = flags.get("_model_name", "the script's model")
        problems.append(
            (
                "HF_CKPT",
                f"{where} is not the shape of {model} (scripts/models/): {'; '.join(wrong)}: "
                "point HF_CKPT at that model's checkpoint, or use the script for this one",
            )
        )
    return problems


def check_modules() -> list[tuple[str, str]]:
    """The top-level packages the train script imports on the head (found, not imported: seconds)."""
    return [
        ("PYTHON", f"the head's Python ({sys.executable}) cannot import {name}: {fix}")
        for name, fix in HEAD_MODULES.items()
        if importlib.util.find_spec(name) is None
    ]


def problems(argv: list[str], model_name: str = "") -> list[tuple[str, str]]:
    flags = parse_flags(argv)
    flags["_model_name"] = model_name or "the script's model"
    found = check_modules() + check_options(flags)
    keys = (str(flags.get("input_key") or "text"), str(flags.get("metadata_key") or "metadata"))
    prompt, evals = flags.get("prompt_data"), flags.get("eval_prompt_data")
    ours = flags.get("custom_generate_function_path") in PLUGIN_GENERATE  # else another row format
    if ours and isinstance(prompt, str) and Path(prompt).is_file():
        found += check_rows("PROMPT_DATA", prompt, *keys)
    if ours and isinstance(evals, list) and len(evals) == 2 and Path(evals[1]).is_file():
        found += check_rows("EVAL_PROMPT_DATA", evals[1], *keys)
    ckpt = flags.get("hf_checkpoint")
    if isinstance(ckpt, str) and ckpt and Path(ckpt).is_dir():
        found += check_checkpoint(ckpt, flags)
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model-name", default="")
    parser.add_argument("train_args", nargs=argparse.REMAINDER, help="-- then slime's arguments")
    ns = parser.parse_args(argv)
    args = ns.train_args[1:] if ns.train_args[:1] == ["--"] else ns.train_args
    for name, message in problems(args, ns.model_name):
        print(f"{name}\t{' '.join(message.split())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
