"""``OatActor``: Oat's PPO actor with a pluggable sampler and the task as its oracle.

Two samplers, one ``step``:

    --sampler vllm     Oat's vLLM engine, built by ``PPOActor.init`` with the policy's
                       sampler dtype (``Precision.vllm_dtype()``); weights arrive through
                       Oat's vLLM worker.
    --sampler builtin  the built-in KV-cache sampler (precision_oat.samplers.kv_cache) in
                       the sampler dtype, no vLLM; runs on CPU. Weights arrive through the same
                       broadcast Oat uses for vLLM, received here, cast by the sampler and checked.

``step`` runs the shared actor (:class:`precision_oat.rl.actor.PrecisionActor`: G samples per
prompt, the task's rewards, the same checks and statistics as the local backend) and hands
Oat ``TransitionData`` whose ``response_logprobs`` are log μ of each sampled token, which is
what ``OatLearner.learning_step`` reads.
"""

from __future__ import annotations

import dataclasses
from typing import List, Optional

import torch
from oat.algorithms.ppo import PPOActor
from oat.types import TransitionData
from oat.utils.distributed import init_process_group, torch_type_codec
from oat.utils.ipc import PlasmaShmClient

from precision_oat.backends.oat.prompt_rows import decode_reference
from precision_oat.precision.weight_sync import push_weights
from precision_oat.rl.actor import PrecisionActor
from precision_oat.tasks import Example, build_task


class OatActor(PPOActor):
    def __init__(self, ipc_server, vllm_args, args) -> None:
        # Oat's get_program sets vLLM's dtype from the trainer flags; the sampler has its own.
        super().__init__(ipc_server, {**vllm_args, "dtype": args.precision.vllm_dtype()}, args)
        self.llm = None
        # Rollouts sampled so far: the index of the next step, counted from 0 as in the local backend.
        self.steps = 0
        # Oat's init sets the actor's index; one built by hand is actor 0.
        self.actor_id = 0

    def init(self, actor_id, save_path) -> None:
        if self.args.sampler == "vllm":
            from precision_oat.backends.oat.oat_sampler import OatVLLMSampler

            super().init(actor_id, save_path)
            self.attach(OatVLLMSampler(self.llm))
            return
        # What ActorBase.init sets up, without a vLLM engine.
        self.actor_id, self.save_path = actor_id, save_path
        self.enable_online_evaluation = self.args.online_evaluation
        self.ipc_client = PlasmaShmClient(self.ipc_server)
        self.use_lora_req = False
        self.oracle, self.oracle_batch_size = None, self.args.oracle_batch_size
        self.attach(self.builtin_sampler())

    def builtin_sampler(self):
        """The embedded KV-cache sampler on this process's device, in the sampler dtype."""
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from precision_oat.samplers.kv_cache import KVCacheSampler

        args = self.args
        self.tokenizer = AutoTokenizer.from_pretrained(args.tokenizer or args.pretrain)
        if self.tokenizer.pad_token_id is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        model = AutoModelForCausalLM.from_pretrained(args.pretrain, torch_dtype=torch.float32)
        device = "cuda" if torch.cuda.is_available() else "cpu"
        return KVCacheSampler(model, args.precision.sampler_dtype, device, self.tokenizer.pad_token_id)

    def attach(self, sampler) -> None:
        """Sample with ``sampler`` and reward with the task (needs ``self.tokenizer``)."""
        source = self.args.source
        self.task = build_task(source.task, source.eval, self.tokenizer)
        self.shared = PrecisionActor(sampler, self.task, self.tokenizer, source.rollout, source.train.seed)

    # --- rollouts ---

    def first_prompt(self) -> int:
        """Where this actor's prompts start in the step's whole batch.

        Oat's learner r sends its share of the step, ``rollout_batch_size_per_device`` prompts, to
        actor r (there are as many actors as learners), so the shares lie in actor order, as the
        ranks' shares do in the local backend.
        """
        return self.actor_id * self.args.rollout_batch_size_per_device

    def rollout(self, prompts: List[str], references: List[str]) -> List[TransitionData]:
        """G samples per prompt, scored by the task, as Oat transitions (μ in ``response_logprobs``)."""
        examples = [Example(q, decode_reference(r)) for q, r in zip(prompts, references)]
        completions, texts, rewards, info = self.shared.experience(examples, self.steps, self.first_prompt())
        self.steps += 1
        g = self.args.num_samples
        return [
            TransitionData(
                prompt=prompts[i // g],
                prompt_ids=c.prompt_ids,
                response=text,
                response_ids=c.response_ids,
                response_logprobs=c.logprobs,
                # Oat's rewards are per token; the task's reward sits on the last one.
                rewards=[0.0] * (len(c.response_ids) - 1) + [float(reward)],
                loss_mask=True,
                info=info,
            )
            for i, (c, text, reward) in enumerate(zip(completions, texts, rewards))
        ]

    def step(self, prompts: List[str], formatted_prompts: List[str], references: Optional[List[str]] = None):
        """Oat's actor step: :meth:`rollout`, handed to the learner through shared memory."""
        assert not self.eval_mode
        del formatted_prompts  # the actor renders with the task's template, as the local backend does
        return self.ipc_client.serialize_ipc(self.rollout(prompts, references))

    def generate_and_maybe_eval(self, prompts, formatted_prompts, references=None, first_prompt=0):
        """Evaluation samples shaped [prompts, n]: their texts and their graded
        :class:`~precision_oat.tasks.evaluation.Sample` records, which ``OatLearner.evaluate`` summarizes
        (Oat's own evaluation, which read correctness here, is not used).

        ``first_prompt`` is where these prompts start in their benchmark; the sampling is the
        local backend's evaluation after the steps sampled so far.
        """
        assert self.eval_mode
        del formatted_prompts
        n = self.args.eval_n
        examples = [Example(q, decode_reference(r)) for q, r in zip(prompts, references)]
        params = self.shared.eval_params(self.args.source.eval, self.steps)
        texts, samples = self.shared.graded_samples(examples, dataclasses.replace(params, first_prompt=first_prompt))
        groups = range(0, len(texts), n)
        return [texts[i : i + n] for i in groups], [samples[i : i + n] for i in groups]

    # --- weight sync (built-in sampler; vLLM goes through Oat's worker) ---

    def init_process_group(self, master_address, master_port, rank_offset, world_size, group_name, backend):
        if self.llm is not None:
            return super().init_process_group(master_address, master_port, rank_offset, world_size, group_name, backend)
        self._sync_device = "cuda" if backend == "nccl" else "cpu"
        self._model_update_group = init_process_group(
            backend=backend, init_method=f"tcp://{master_address}:{master_port}",
            world_size=world_size, rank=rank_offset, group_name=group_name,
        )

    def update_weight(self, name, dtype, shape, cuda_ipc_handles=None, empty_cache=False):
        if self.llm is not None:
            return super().update_weight(name, dtype, shape, cuda_ipc_handles, empty_cache)
        weight = torch.empty(shape, dtype=torch_type_codec(dtype), device=self._sync_device)
        self._model_update_group.broadcast(weight, 0).wait()
        # The trainer's compute weights: the masters cast to the sampler dtype wherever the two dtypes agree or the
        # trainer's are fp32 (to_oat_args refuses the rest), so the checked push holds the contract.
        push_weights(self.shared.sampler, [(name, weight)], self.args.precision)
