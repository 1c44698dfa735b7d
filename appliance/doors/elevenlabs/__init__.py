"""ElevenLabs' input-streaming WebSocket on the HTTP listener (docs/agents.md)."""
