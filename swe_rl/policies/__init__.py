"""Policies: what produces assistant turns. See `swe_rl.agent.protocols.Policy`.

- `OpenAIChatPolicy` (`openai_chat`): any OpenAI-compatible chat endpoint, through litellm.
- `GoldPolicy` (`gold`): applies the instance's gold patch and submits (checks images and grading).
- `NoopPolicy` (`noop`): submits at once with no change (expected grade: no_patch).

Imports here are light: litellm is only imported when an `OpenAIChatPolicy` is built.
"""

from swe_rl.policies.gold import GoldPolicy
from swe_rl.policies.noop import NoopPolicy
from swe_rl.policies.openai_chat import OpenAIChatConfig, OpenAIChatPolicy

__all__ = ["GoldPolicy", "NoopPolicy", "OpenAIChatConfig", "OpenAIChatPolicy"]
