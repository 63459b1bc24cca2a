"""corral's wire protocol, which the client and the server both depend on.

    frames      the `/ws` frames, both ways, and `/schema` (OpenEnv 0.10's protocol)
    catalog     what a served bundle offers: splits, tasks, tools, and the reserved tool names
    outcomes    how an episode ended: its status, and its cause in a word
    records     the episode records the server writes and a trainer joins with its own
    rewards     from an episode's scores to one reward
    surrogates  reading JSON from outside without lone surrogates
    harness/    a harness episode's captured model calls (calls), their token-prefix graph of
                retries, side calls and training paths (graph), and the episode's capture as
                OpenEnv's `TrainingTrace` (capture)

Nothing here presents anything (the client's display adapts the frames from outside), and
nothing imports any other part of corral but `corral.errors`.
"""
