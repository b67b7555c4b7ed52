"""The RL step shared by every backend: rollouts, scoring, the update and its plan, seeds, the actor, and
the settings a learner is built from."""
