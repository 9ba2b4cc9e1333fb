"""`slaguard serve`: the routing API, the OpenAI-compatible gateway and their loops."""
