"""Test doubles that speak real protocols, for the test suite and the benchmarks; never deployed.

- `fake_openai.FakeOpenAI`: a scripted OpenAI-compatible chat server (`/v1/chat/completions`).
- `fake_sglang.FakeSGLang`: a scripted SGLang `/generate` server (token ids and log-probs).
- `loopback_server.LoopbackServer`: the base of both, a Starlette app served by uvicorn on loopback.

They need the `server` extra (starlette, uvicorn). Production code never imports this package
(nor `swe_rl.fleet.fakes`); tests/test_package_names.py checks it.
"""
