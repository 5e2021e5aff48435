"""Runs `swe-export-verified-assets` (swe_rl.data.export_swebench_verified_assets); needs swe-rl installed."""

from swe_rl.data.export_swebench_verified_assets import main

raise SystemExit(main())
