"""An episode: the state machine that plays one task in one sandbox, its deadlines, how it ends
(endings, canary) and how it is scored."""
