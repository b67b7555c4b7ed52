"""precision-oat: reinforcement learning of LLMs with numerical precision as a first-class choice.

From Python (docs/python.md)::

    from precision_oat import make_args
    from precision_oat.main import run

    summary = run(make_args(algo="grpo", dtype="bf16", steps=20))
"""

__version__ = "0.1.0"


def make_args(preset=None, **values):
    """The :class:`~precision_oat.args.Args` of a run from keyword values named as the flags are.

    ``make_args(algo="grpo", max_new_tokens=64)`` is ``--algo grpo --max-new-tokens 64``: each
    keyword is a flag's name with underscores (the flat names of a preset, whatever group holds the
    field); a sequence gives a multi-value flag. ``preset`` (a YAML file such as those under ``args/``, or a
    run's ``config.json``) is applied first and the keywords override it, as on the command line. Every
    check of the command line runs here too: bad values raise
    :class:`~precision_oat.errors.UserError` naming the keyword (an unknown one with the closest flag).
    To parse command-line words instead, use :func:`precision_oat.presets.parse_args`.
    """
    # Imported here so that `import precision_oat` stays light (no torch, no flags' registries).
    from precision_oat.args import Args
    from precision_oat.errors import UserError
    from precision_oat.presets import apply_values, load_preset, refuse_unread_changes

    base = Args()
    if preset is not None:
        base = load_preset(preset)
        values = {"preset": str(preset), **values}
    args = apply_values(base, values, source="make_args")
    try:
        refuse_unread_changes(base, args)
    except UserError as e:
        raise UserError(f"make_args: {e}") from None
    return args
