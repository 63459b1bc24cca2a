"""TRL's experimental GMPO trainer, called like `GRPOTrainer`: reward functions optional.

TRL 1.16's `trl.experimental.gmpo.GMPOTrainer(model, reward_funcs, args=None, **kwargs)` makes
`reward_funcs` a required positional argument, unlike `GRPOTrainer`, whose environments may own
the reward (`get_reward`). Subclassing only to give it the default lets every preset's trainer be
called the same way: `p.trainer(model=..., args=p.config(...), environment_factory=env.factory)`.
"""

from __future__ import annotations

from typing import Any

from trl.experimental.gmpo import GMPOTrainer as _TRLGMPOTrainer


class GMPOTrainer(_TRLGMPOTrainer):
    """`trl.experimental.gmpo.GMPOTrainer`, `reward_funcs` defaulting to None as in GRPOTrainer."""

    def __init__(self, model: Any, reward_funcs: Any = None, args: Any = None, **kwargs: Any):
        super().__init__(model, reward_funcs, args=args, **kwargs)
