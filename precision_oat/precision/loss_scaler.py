"""Dynamic loss scaling with the semantics of the pinned DeepSpeed (0.19.8), for learners that manage their own fp16 step.

``scale`` multiplies the loss before backward. After backward the learner unscales the
gradients and calls :meth:`update` with whether any was inf/nan: an overflow means the
step is skipped; the ``hysteresis``-th overflow since the scale last grew (or since the
start) shrinks the scale, and so does every overflow after it until the scale grows again.
With c the clean steps since the last overflow (or the start), the scale grows when c − 1
is a positive multiple of ``growth_interval`` (N): on the (N + 1)-th clean step, then every
N. DeepSpeed 0.16.8 (the Oat backend's) grows one clean step sooner, at c = N, 2N, ….

Two departures: the factors are configurable (DeepSpeed's are 2 and 0.5), and an overflow
with the scale already at ``min_scale`` skips the step and keeps the floor, where
DeepSpeed's engine raises and ends the run.
"""

from __future__ import annotations

from precision_oat.precision.policy import LossScaling


class LossScaler:
    def __init__(self, config: LossScaling):
        self.config = config
        self.scale = config.initial_scale if config.enabled else 1.0
        self.clean_steps = 0
        self.skipped_steps = 0
        self._hysteresis_left = config.hysteresis

    def update(self, overflow: bool) -> bool:
        """Record one optimiser step; return True when it must be skipped."""
        c = self.config
        if not overflow:
            self.clean_steps += 1
            if c.mode == "dynamic" and self.clean_steps > 1 and (self.clean_steps - 1) % c.growth_interval == 0:
                self.scale *= c.growth_factor
                self._hysteresis_left = c.hysteresis
            return False
        self.skipped_steps += 1
        self.clean_steps = 0
        if c.mode == "dynamic":
            # As DeepSpeed: a spent budget stays spent (every overflow shrinks) until the scale grows.
            if self._hysteresis_left <= 1:
                self.scale = max(self.scale * c.backoff_factor, c.min_scale)
            else:
                self._hysteresis_left -= 1
        return True

    def state_dict(self) -> dict:
        return {
            "scale": self.scale,
            "clean_steps": self.clean_steps,
            "skipped_steps": self.skipped_steps,
            "hysteresis_left": self._hysteresis_left,
        }

    def load_state_dict(self, state: dict) -> None:
        self.scale = state["scale"]
        self.clean_steps = state["clean_steps"]
        self.skipped_steps = state["skipped_steps"]
        self._hysteresis_left = state["hysteresis_left"]
