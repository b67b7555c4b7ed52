"""``OatActor`` samples what the local backend samples: same --seed, same step, same row.

Actors are built by hand with the built-in sampler on the embedded policy, as Oat's ``init``
would build them, each at its index; the local backend's actor shares their sampler.
"""

from precision_oat.backends.oat.oat_actor import OatActor
from precision_oat.backends.oat.prompt_rows import prompt_row
from precision_oat.rl.actor import PrecisionActor as LocalActor

# Four GPUs: two actors, two learners, two prompts each per step (the mapping only: all runs on CPU).
FLAGS = ("--dtype", "fp32", "--prompts-per-step", "4", "--num-samples", "2", "--max-new-tokens", "6",
         "--eval-every", "10", "--eval-samples", "2", "--seed", "5")


def oat_actors(oat_args, count: int):
    args = oat_args(*FLAGS, cuda_devices=4)
    assert args.rollout_batch_size_per_device == 2
    first = OatActor(None, {}, args)
    sampler = first.builtin_sampler()
    actors = []
    for actor_id in range(count):
        actor = first if actor_id == 0 else OatActor(None, {}, args)
        actor.actor_id, actor.tokenizer = actor_id, first.tokenizer
        actor.attach(sampler)
        actors.append(actor)
    return args, actors


def local_actor(args, oat_actor):
    source = args.source
    return LocalActor(oat_actor.shared.sampler, oat_actor.task, oat_actor.tokenizer, source.rollout, source.train.seed)


def questions_and_references(examples, task):
    rows = [prompt_row(task, e) for e in examples]
    return [q for _, q, _ in rows], [ref for _, _, ref in rows]


def test_two_actors_of_one_step_draw_distinct_streams(oat_args):
    _, (first, second) = oat_actors(oat_args, 2)
    # The same prompts at both actors: only their place in the step's batch tells them apart.
    questions, references = questions_and_references(first.task.train_set()[:2], first.task)
    a = first.rollout(questions, references)
    b = second.rollout(questions, references)
    assert [t.response_ids for t in a] != [t.response_ids for t in b]


def test_the_actors_of_a_step_sample_what_the_local_engine_samples_for_its_batch(oat_args):
    args, actors = oat_actors(oat_args, 2)
    task = actors[0].task
    local = local_actor(args, actors[0])
    batches = [task.train_set()[:4], task.train_set()[4:8]]
    for step, batch in enumerate(batches):
        # Oat's learner r sends prompts [2r, 2r + 2) of the step to actor r.
        oat_rows = []
        for r, actor in enumerate(actors):
            oat_rows += actor.rollout(*questions_and_references(batch[2 * r : 2 * r + 2], task))
        completions, _, _, _ = local.experience(batch, step)
        assert [t.response_ids for t in oat_rows] == [c.response_ids for c in completions], f"step {step}"


def test_evaluation_samples_what_the_local_engine_samples_after_as_many_steps(oat_args):
    args, (actor,) = oat_actors(oat_args, 1)
    task = actor.task
    local = local_actor(args, actor)
    actor.rollout(*questions_and_references(task.train_set()[:2], task))
    benchmark = next(iter(task.eval_sets().values()))[:4]
    params = local.eval_params(args.source.eval, 1)
    expected = local.graded_samples(benchmark, params)

    actor.eval_mode = True
    texts, samples = [], []
    for first in (0, 2):  # two evaluation batches of two prompts, as the learner sends them
        questions, references = questions_and_references(benchmark[first : first + 2], task)
        responses, graded = actor.generate_and_maybe_eval(questions, None, references, first_prompt=first)
        assert [len(group) for group in graded] == [params.n] * 2
        texts += [text for group in responses for text in group]
        samples += [sample for group in graded for sample in group]
    assert (texts, samples) == expected
    # Two evaluations after different numbers of steps draw different streams.
    assert params.seed != local.eval_params(args.source.eval, 0).seed
