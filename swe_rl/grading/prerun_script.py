"""The pre-run call's one shell script (`prerun`): its parts, in the order they ran as calls of their own.

`bundle_script` writes the patch baseline, the canonical script, the test files' reader and the clean
tree's probe into one script whose output carries each answer in a section of its own (`prerun` reads
them back); `_Plans` says which parts a grading asks for.
"""

from __future__ import annotations

import base64
import secrets
import shlex
from dataclasses import dataclass

from swe_rl.fleet.patch_baseline import BASELINE_CORE
from swe_rl.grading.patch.canonical import WORK_DIR, canonical_script
from swe_rl.grading.runner.probe import ProbePlan
from swe_rl.grading.runner.probe_languages import LanguageProbePlan
from swe_rl.grading.twins.plant import reader_script
from swe_rl.tasks import TaskInstance

__all__ = ["bundle_script", "found_lines"]


@dataclass
class _Plans:
    paths: list[str]
    python: tuple[ProbePlan, ProbePlan] | None  # (clean, run)
    language: LanguageProbePlan | None
    names: tuple[str, str] | None = None
    """The pytest probe's (module, folder), shared by its clean and patched runs."""
    search: bool = False
    """A Go/JavaScript/Rust row without test patch: its test files are searched out (`search_patterns`)."""

    @property
    def reads(self) -> bool:
        return bool(self.paths) or self.search

    @property
    def clean_script(self) -> str:
        if self.python is not None:
            return self.python[0].script
        return self.language.clean_script if self.language is not None else ""

    @property
    def clean_report(self) -> str:
        if self.python is not None:
            return self.python[0].report_path
        return self.language.clean_path if self.language is not None else ""


def _heredoc(path: str, text: str) -> list[str]:
    """Lines writing `text` to `path` exactly (base64: no delimiter can occur in it)."""
    data = base64.b64encode(text.encode("utf-8", "surrogateescape")).decode()
    lines = [data[i : i + 76] for i in range(0, len(data), 76)]
    end = f"EOF_SWE_PRE_{secrets.token_hex(8)}"
    return [f"base64 -d > {shlex.quote(path)} <<'{end}'", *lines, end]


def bundle_script(
    instance: TaskInstance,
    patch: str,
    plans: _Plans,
    marker: str,
    mine: str,
    extra_roots: list[str],
    timeout: float,
    interpreter: bool = True,
    baseline: bool = False,
) -> str:
    """The one script: `marker` names the canonical script's sections, `mine` the others'; `interpreter`:
    the canonical script asks the image's interpreter (not when this task's answer is kept); `baseline`:
    the patch baseline is recorded first, as the fleet's ``record_baseline`` call records it (the same
    script in the work directory; a work tree it cannot be taken in goes on without one, as there)."""
    work = WORK_DIR
    folder = f"/tmp/.swe-twins-{secrets.token_hex(8)}"
    lines = [f"mkdir -p {work} || exit 2"]
    if baseline:
        lines += [
            *_heredoc(f"{work}/baseline.sh", BASELINE_CORE),  # (its summary, unread here, costs 4 processes)
            f"bash {work}/baseline.sh > /dev/null 2> {work}/baseline.err || "
            f"{{ echo 'no patch baseline:' >&2; tail -c 2000 {work}/baseline.err >&2; }}",
        ]
    lines += [
        *_heredoc(f"{work}/patch.diff", patch),
        *_heredoc(f"{work}/canon.sh", canonical_script(marker, extra_roots, interpreter)),
        f"bash {work}/canon.sh > {work}/canon.out 2> {work}/canon.err",
        f'canon=$?; cat {work}/canon.out; [ "$canon" = 0 ] || {{ cat {work}/canon.err >&2; exit "$canon"; }}',
    ]
    applied = f"grep -qx -- '--{marker}-end--' {work}/canon.out && ! grep -qx -- '--{marker}-failed--' {work}/canon.out"
    lines += [f"if {applied}; then", ":"]  # the rest only for a patch git apply accepted (as before)
    if plans.reads:
        lines += _heredoc(f"{work}/reader.sh", reader_script(instance, plans.paths, folder))
        lines.append(f"if bash {work}/reader.sh > /dev/null 2>&1; then")  # as `read_test_files`: all or none
        for i in range(len(plans.paths)):
            lines.append(
                f"[ -f {folder}/{i} ] && {{ echo '--{mine}-file-{i}--'; base64 -w0 < {folder}/{i}; echo; }}"
            )
        if plans.search:
            lines += found_lines(folder, mine)
        lines += ["fi", f"rm -rf {folder}"]
    if plans.clean_script:
        report, log = shlex.quote(plans.clean_report), f"{work}/clean.log"
        bounded = f"timeout -k 10 {int(timeout)} bash {work}/clean.sh"
        lines += [
            *_heredoc(f"{work}/clean.sh", plans.clean_script),
            f"if command -v timeout >/dev/null 2>&1; then {bounded}; else bash {work}/clean.sh; fi "
            f"> {log} 2>&1 < /dev/null",
            *(  # the language probes read the log; pytest's report says all (its collect-only tree: 60 KB)
                [f"echo '--{mine}-log--'; base64 -w0 < {log}; echo"] if plans.language is not None else []
            ),
            f"[ -f {report} ] && {{ echo '--{mine}-report--'; base64 -w0 < {report}; echo; }}",
        ]
    lines.append("fi")
    lines.append(f"echo '--{mine}-done--'")
    return "\n".join(lines) + "\n"


def found_lines(folder: str, mine: str) -> list[str]:
    """Lines printing what the reader's search found (a Go/JS/Rust row without test patch): the list of
    paths, then each file, as `read_test_files` reads them one call each."""
    return [
        f"[ -f {folder}/found ] && {{ echo '--{mine}-found--'; base64 -w0 < {folder}/found; echo; }}",
        f'__swe_n=0; while [ -f {folder}/found$__swe_n ]; do echo "--{mine}-found-$__swe_n--"; '
        f"base64 -w0 < {folder}/found$__swe_n; echo; __swe_n=$((__swe_n+1)); done",
    ]
