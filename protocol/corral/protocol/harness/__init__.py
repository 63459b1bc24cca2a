"""A harness episode's model calls as captured: each call (calls), the token-prefix graph
of an episode's calls (graph), and the episode's capture as OpenEnv's `TrainingTrace` (capture)."""
