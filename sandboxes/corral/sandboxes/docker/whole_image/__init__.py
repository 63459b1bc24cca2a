"""An image run whole (a Harbor task's): its tests in a fresh container made from what the
agent left, with bounds on what the agent may write and where the tests may look."""
