"""Engines: what belongs to one serving engine and release (SGLang 0.5.23 today).

Each engine is one package here that provides the seam described in `docs/architecture.md`:
resolve a launch, the capture list per graph phase, the replay rule per phase, the flags to deploy
and a log reader. The engine-neutral core (`cpbcg.planner`) never imports an engine.
"""
