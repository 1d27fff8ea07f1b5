"""Agent integration: what wires lethe into coding agents.

``hooks`` (Claude Code and Codex hooks) and ``hookstate`` (their per-session state),
``mine`` (agent transcripts into memories), ``install`` (``lethe install codex``),
``mcp_server`` (``lethe mcp``) and ``enrich`` (an Anthropic model's notes beside each entry).
They build on the core (``lethe_sql``) and never import the CLI (``lethe_sql.cli``).
"""
