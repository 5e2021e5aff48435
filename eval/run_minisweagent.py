"""Runs `swe-mini-eval` (swe_rl.eval.run_minisweagent); needs swe-rl installed."""

from swe_rl.eval.run_minisweagent import main

raise SystemExit(main())
