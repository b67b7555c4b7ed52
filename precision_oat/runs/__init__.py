"""A run's bookkeeping on disk: its folder and lock, resume, checkpoints, signals, metrics log and update profile."""
