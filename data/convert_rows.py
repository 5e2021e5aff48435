"""Runs `swe-convert-rows` (swe_rl.data.convert_rows); needs swe-rl installed."""

from swe_rl.data.convert_rows import main

raise SystemExit(main())
