"""corral's wire protocol, which the client and the server both depend on.

    frames      the `/ws` frames, both ways, and `/schema` (OpenEnv 0.10's protocol)
    catalog     what a served bundle offers: splits, tasks, tools, and the reserved tool names
    outcomes    how an episode ended: its status, and its cause in a word
    records     the episode records the server writes and a trainer joins with its own
    rewards     from an episode's scores to one reward
    surrogates  reading JSON from outside without lone surrogates
    traces      a harness episode's captured model call, its capture level, the training sampling
    trace_graph the token-prefix graph of an episode's calls: retries, side calls, training paths
    trace_capture an episode's capture, in numbers and as OpenEnv's `TrainingTrace`

Nothing here presents anything (the client's display adapts the frames from outside), and
nothing imports any other part of corral but `corral.errors`.
"""
