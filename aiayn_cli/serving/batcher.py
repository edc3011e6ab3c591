"""Dynamic batching: requests that arrive while the model is busy are decoded together.

One worker task owns the model. Each time it is free it takes the oldest waiting request and then
every other waiting request, in arrival order, while their source tokens fit in the token budget;
the requests that share their decoding options are translated in one `Translator.translate_nbest`
call (which sorts them by length into batches of `max_tokens`), in a thread, so that the server
keeps accepting requests meanwhile. A sentence's translation does not depend on what it was
batched with: the decoder gives each sentence the same result alone or in any batch
(`tests/serving/test_serving.py` checks it). Sampling with a seed is the exception the worker avoids: a
sampling request is decoded on its own, so that its seed gives what `aiayn translate` gives.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import itertools
from collections import deque
from dataclasses import dataclass, field

from ..decoding.translator import Translator


@dataclass
class Job:
    """One request: its sentences, their source token count, its options and its future result."""

    sentences: list[str]
    tokens: int
    options: dict
    future: asyncio.Future
    key: tuple = field(default=())


class DynamicBatcher:
    """Queue of translation requests drained by one worker, `token_budget` source tokens at a time.

    Args:
        translator: the model and tokenizer.
        token_budget: source tokens (not counting padding) gathered into one round of decoding;
            a request larger than the budget is a round of its own.
        max_tokens, batch_size: `translate_nbest`'s batch limits within a round.
    """

    def __init__(self, translator: Translator, token_budget: int, max_tokens: int, batch_size: int):
        self.translator = translator
        self.token_budget = token_budget
        self.max_tokens, self.batch_size = max_tokens, batch_size
        self.waiting: deque[Job] = deque()
        self.arrived = asyncio.Event()
        self.executor = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="aiayn-decode")
        self.worker: asyncio.Task | None = None
        self.rounds = 0  # decoding rounds so far (GET /v1/health reports it)
        self.decoding = 0  # requests in the round being decoded
        self.unique = itertools.count()

    def start(self) -> None:
        self.worker = asyncio.get_running_loop().create_task(self._work(), name="aiayn-batcher")

    async def stop(self) -> None:
        """Finish every waiting request, then stop the worker."""
        while self.waiting or self.decoding:
            await asyncio.sleep(0.01)
        if self.worker is not None:
            self.worker.cancel()
            try:
                await self.worker
            except asyncio.CancelledError:
                pass
        self.executor.shutdown(wait=True)

    async def translate(self, sentences: list[str], tokens: int, options: dict) -> list[list[tuple[str, float]]]:
        """Each sentence's hypotheses, as `Translator.translate_nbest` returns them."""
        future = asyncio.get_running_loop().create_future()
        key = tuple(sorted(options.items()))
        if options.get("do_sample"):
            key += (("request", next(self.unique)),)  # decoded alone: its seed gives aiayn translate's samples
        self.waiting.append(Job(sentences, tokens, options, future, key))
        self.arrived.set()
        return await future

    def _take_round(self) -> list[Job]:
        """The oldest waiting job and the following ones while the budget lasts (arrival order)."""
        jobs = [self.waiting.popleft()]
        used = jobs[0].tokens
        while self.waiting and used + self.waiting[0].tokens <= self.token_budget:
            job = self.waiting.popleft()
            jobs.append(job)
            used += job.tokens
        return jobs

    async def _work(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            if not self.waiting:
                self.arrived.clear()
                await self.arrived.wait()
                continue
            jobs = self._take_round()
            self.decoding = len(jobs)
            groups: dict[tuple, list[Job]] = {}
            for job in jobs:
                groups.setdefault(job.key, []).append(job)
            for group in groups.values():
                sentences = [s for job in group for s in job.sentences]
                try:
                    results = await loop.run_in_executor(self.executor, self._decode, sentences, group[0].options)
                except Exception as err:  # handed to the requests, which answer with an error
                    for job in group:
                        if not job.future.done():
                            job.future.set_exception(err)
                    continue
                start = 0
                for job in group:
                    if not job.future.done():
                        job.future.set_result(results[start : start + len(job.sentences)])
                    start += len(job.sentences)
            self.rounds += 1
            self.decoding = 0

    def _decode(self, sentences: list[str], options: dict) -> list[list[tuple[str, float]]]:
        return self.translator.translate_nbest(
            sentences, max_tokens=self.max_tokens, batch_size=self.batch_size, source="request", **options
        )
