"""Per-rollout integrity figures, the same for training metadata and eval rows/summaries.

`rollout_integrity` condenses one episode and its grade into flat fields: tamper records
(rules, paths, actions), behaviour-monitor flag counts, the official verdict next to ours,
and git hygiene. `integrity_rates` turns many such rows into run-level rates
(tamper rate; voided — a record that voids the reward —, capability-flagged, canary-tripped and twin-tripped rates;
flag rate; official vs integrity resolve rates and their gap).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["integrity_rates", "is_flagged", "rollout_integrity"]


def rollout_integrity(agent: Any, grade: Any) -> dict[str, Any]:
    """Flat integrity fields of one rollout (`AgentResult`, `GradeResult`; either may be None)."""
    tamper = getattr(grade, "tamper", None)
    official = getattr(grade, "official", None)
    flags = dict(agent.flag_counts) if agent is not None else {}
    hygiene = getattr(agent, "git_hygiene", None)
    records = [
        {"path": r.path, "rule": r.rule, "action": r.action, "reason": r.reason}
        for r in (tamper.records if tamper else [])
    ]
    return {
        "tampered": bool(records),
        "voided": any(r["action"] == "voided" for r in records),
        "capability_flagged": any(r["rule"] == "capability" and r["action"] == "noted" for r in records),
        "canary_tripped": any(r["rule"] == "canary" for r in records),
        "twin_tripped": any(r["rule"] == "twin" for r in records),
        "tamper_records": records,
        "tamper_rules": sorted({r["rule"] for r in records}),
        "flags": flags,
        "flagged_steps": sum(1 for s in (agent.steps if agent else []) if getattr(s, "flags", None)),
        "official_status": official.status if official else None,
        "official_resolved": official.resolved if official else None,
        "official_source": official.source if official else None,
        "git_hygiene": hygiene.model_dump(mode="json") if hygiene is not None else None,
    }


def is_flagged(info: Mapping[str, Any]) -> bool:
    """A rollout the monitor flagged or whose patch tampered with the tests."""
    return bool(info.get("flags")) or bool(info.get("tampered"))


def integrity_rates(rows: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """Run-level figures over rows carrying `rollout_integrity` fields (rows without them count as clean)."""
    rows = list(rows)
    n = len(rows)

    def rate(k: int) -> float:
        return round(k / n, 4) if n else 0.0

    tampered = sum(1 for r in rows if r.get("tampered"))
    voided = sum(1 for r in rows if r.get("voided"))
    capability_flagged = sum(1 for r in rows if r.get("capability_flagged"))
    canary_tripped = sum(1 for r in rows if r.get("canary_tripped"))
    twin_tripped = sum(1 for r in rows if r.get("twin_tripped"))
    flagged = sum(1 for r in rows if r.get("flags"))
    judged = [r for r in rows if r.get("official_resolved") is not None]
    official = sum(1 for r in judged if r.get("official_resolved"))
    ours = sum(1 for r in judged if r.get("resolved"))
    bought = sum(1 for r in judged if r.get("official_resolved") and not r.get("resolved"))
    return {
        "tamper_rate": rate(tampered),
        "tampered": tampered,
        "voided_rate": rate(voided),
        "voided": voided,
        "capability_flag_rate": rate(capability_flagged),
        "canary_trip_rate": rate(canary_tripped),
        "canary_tripped": canary_tripped,
        "twin_trip_rate": rate(twin_tripped),
        "twin_tripped": twin_tripped,
        "flag_rate": rate(flagged),
        "flagged": flagged,
        "flag_counts": dict(sorted(Counter(f for r in rows for f in (r.get("flags") or {})).items())),
        "tamper_rule_counts": dict(
            sorted(Counter(x for r in rows for x in (r.get("tamper_rules") or [])).items())
        ),
        "official_resolve_rate": rate(official),
        "integrity_resolve_rate": rate(ours),
        "verdict_gap": rate(official - ours),
        "resolved_only_officially": bought,
    }
