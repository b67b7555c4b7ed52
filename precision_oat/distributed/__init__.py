"""Several processes on one step: the world of ranks, its collectives, and the process group."""
