"""Backends: where a run executes. ``local`` embeds the whole loop; ``oat`` runs it on Oat and launchpad."""
