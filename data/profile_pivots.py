"""Runs `swe-profile-pivots` (swe_rl.data.profile_pivots); needs swe-rl installed."""

from swe_rl.data.profile_pivots import main

raise SystemExit(main())
