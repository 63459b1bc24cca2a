"""Harbor task folders served as corral bundles (docs/harbor.md).

`corral check DIR` and `corral serve DIR` read a folder of Harbor tasks (task.toml,
instruction.md, environment/, tests/, solution/; older task.yaml folders migrated) through
`loader.load_harbor`. Each task runs in its own image, whole and hardened; the agent's tools
are served from the server through the container's exec (`hosted`, `tools`); its tests run in
a copy of what the agent left and write the reward the server reads (`RewardFileVerifier`);
`cli.oracle` plays each task's solution, or nothing, to check the corpus before training on it.
"""
