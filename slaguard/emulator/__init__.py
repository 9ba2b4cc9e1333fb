"""A vLLM-like backend emulator: OpenAI-compatible, paced by the fitted latency model."""
