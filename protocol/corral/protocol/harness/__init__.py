"""A harness episode's model calls as captured: each call (calls), the token-prefix graph
of an episode's calls (graph), the episode's capture as OpenEnv's `TrainingTrace` (capture), and the
relay's frames that carry the calls to the client's engine (relay_frames)."""
