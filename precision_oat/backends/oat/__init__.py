"""The Oat backend: real subclasses of Oat's ``PPOActor`` / ``PPOLearner`` (oat-llm 0.2.4).

    program.py   ``run(args)``: Oat's ``get_program`` + launchpad
    args.py      our typed args → Oat's ``PPOArgs`` (one function) plus our fields
    learner.py   ``OatLearner(PolicyLoss, PPOLearner)``: the update through ``policy_loss``
    actor.py     ``OatActor(PPOActor)``: vLLM or the built-in sampler, task rewards
    strategy.py  DeepSpeed config from the :class:`~precision_oat.precision.policy.Precision` policy
    cpu.py       what Oat assumes about CUDA, made to hold on a CPU-only machine
    console.py   the local backend's lines on the console, Oat's own output in OUTPUT_DIR/oat.log

Importing this package imports nothing from Oat; its modules do (Python 3.10 venv from
``scripts/oat_env.sh``). See docs/oat.md.
"""
