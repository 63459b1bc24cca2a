"""How an episode speaks to its env: over its sandbox's stdio, or in the server's own process."""
