"""The RL step shared by every backend: rollouts, scoring, the update and its plan, seeds, the actor."""
