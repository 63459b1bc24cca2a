"""Serving: the FastAPI app, the `/ws` and `POST /mcp` frames, sessions, the Task API, metrics,
and the bundle as served."""
