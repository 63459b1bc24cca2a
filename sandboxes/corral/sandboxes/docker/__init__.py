"""The Docker provider: an episode in a hardened container of its env's image (`--sandbox docker`)."""
