"""Training against corral with TRL: algorithm presets, token-exact rollouts, recipes' helpers.

Depends on the client only (`corral.client`), never on the server: a GPU box installs
`corral[train]` and trains against a bundle served elsewhere.
"""
