"""Fair embedding between tenants: weighted fair queueing of embedding jobs by tokens.

The memory service puts a :class:`FairEmbedder` in front of its embedder, so
no tenant's large texts can starve another tenant's small ones (issue 17):

* **Fair queueing by tokens.** Each embedding call is a job of its tenant
  (the :data:`TENANT` of the calling task: the service sets the API key's
  project). A :class:`FairScheduler` runs at most ``concurrency`` model calls
  at once and picks what runs next by *start-time fair queueing* weighted by
  cost (the virtual-time form of weighted round-robin): a job's start tag is
  the later of the scheduler's virtual time and its tenant's previous finish
  tag, its finish tag that plus its cost in tokens, and the smallest start tag
  runs first (ties by arrival). So tenants share the model by tokens, not by
  requests; a tenant's own jobs keep their order; and an idle tenant banks no
  credit (it starts at the virtual time).
* **Bounded wait.** A batch costs at most ``quantum`` tokens (one text is cut
  to the model's window, :mod:`mongomem.adapters.embeddings`, so one text fits); with
  ``concurrency`` 1, a small job of a tenant that was idle waits for at most
  the batch in flight, plus jobs of other tenants started no later than it.
  A tenant flooding window-sized texts gets one of them in before it.
* **Micro-batches.** One model call embeds several queued jobs (of any
  tenants, in the order the round-robin picks them) up to ``batch_texts``
  texts and ``quantum`` tokens. A batch that fails is retried job by job, so a
  text of one tenant cannot fail another's.
* **Deadlines.** A job is watched by the request's
  :class:`~mongomem.deadlines.Deadline`: when it ends (the client went away,
  or the time is up) the job fails with
  :class:`~mongomem.errors.DeadlineExceeded` and is skipped, never embedded. A
  caller whose task is cancelled drops its job the same way.

Stored texts and queries are separate schedulers (lanes): the local model has
an engine for each, so a search never queues behind saves.

**Expected wait.** A scheduler measures what the model gets through (tokens
a second, a moving average over its calls, times ``concurrency``) and
:attr:`FairScheduler.expected_wait_s` is what waits divided by that. A job
dropped at its deadline fails with that wait (what waits, and itself) as its
:class:`~mongomem.errors.DeadlineExceeded`'s ``retry_after``, which the
service sends as ``Retry-After``: clients come back when the queue has
drained, not all after one second.

**Queue depth.** A scheduler reports every change of what waits (jobs and
their tokens) to its ``observe`` callback; the service turns those into the
gauges ``mongomem_service_embedding_queue_jobs`` and
``…_queue_tokens`` per lane (:mod:`mongomem.service.http`).
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from collections.abc import Awaitable, Callable, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from mongomem.adapters.embeddings import Embedder, embed_queries
from mongomem.deadlines import current_deadline
from mongomem.errors import DeadlineExceeded, EmbeddingError

__all__ = ["TENANT", "DepthObserver", "FairEmbedder", "FairScheduler", "estimated_tokens"]

#: The tenant the current task embeds for (the memory service sets the key's project).
TENANT: ContextVar[str] = ContextVar("mongomem_tenant", default="")

Vectors = list[list[float]]
#: Told each change of a queue: (change in jobs waiting, change in their tokens).
DepthObserver = Callable[[int, int], None]


def estimated_tokens(text: str, window: int) -> int:
    """A text's cost in tokens, estimated without the tokenizer: about four bytes a
    token, at least 1, and at most ``window`` (what the model reads of one text)."""
    return max(1, min(window, 2 + len(text.encode()) // 4))


@dataclass(eq=False)
class _Job:
    tenant: str
    texts: list[str]
    cost: int
    future: asyncio.Future[Vectors] = field(repr=False)
    taken: bool = False  # in a batch (or skipped): no longer waiting


class FairScheduler:
    """Runs ``call`` (one model call for a list of texts) for many tenants, fairly.

    See the module docstring for what is guaranteed. ``cost`` prices one text
    in tokens; ``quantum`` is what one batch may cost at most (one window);
    ``batch_texts`` the most texts in one call; ``observe`` is told every change of
    what waits (:data:`DepthObserver`); ``clock`` times the model calls (seconds).
    """

    def __init__(
        self,
        call: Callable[[list[str]], Awaitable[Vectors]],
        *,
        cost: Callable[[str], int],
        quantum: int,
        batch_texts: int = 16,
        concurrency: int = 1,
        observe: DepthObserver | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        if quantum < 1 or batch_texts < 1 or concurrency < 1:
            raise ValueError("quantum, batch_texts and concurrency must be at least 1")
        self._call = call
        self._cost = cost
        self._quantum = quantum
        self._batch_texts = batch_texts
        self._concurrency = concurrency
        self._heap: list[tuple[int, int, _Job]] = []  # (start tag, arrival, job)
        self._finish: dict[str, int] = {}  # each tenant's last finish tag
        self._now = 0  # virtual time: the start tag of the latest job begun
        self._arrivals = itertools.count()
        self._running = 0
        self._waiting = 0
        self._waiting_tokens = 0
        self._observe = observe
        self._tasks: set[asyncio.Task[None]] = set()
        self._rate: float | None = None  # tokens a second of one model call (moving average)
        self._clock = clock

    @property
    def queued(self) -> int:
        """Jobs waiting to be embedded (an abandoned job stops counting at once)."""
        return self._waiting

    @property
    def queued_tokens(self) -> int:
        """The tokens of the jobs waiting (as :attr:`queued` counts them)."""
        return self._waiting_tokens

    @property
    def expected_wait_s(self) -> float | None:
        """Seconds until what waits now is embedded, at the measured rate (``None``: no
        call measured yet; ``0``: nothing waits)."""
        if not self._waiting_tokens:
            return 0.0
        if self._rate is None:
            return None
        return self._waiting_tokens / (self._rate * self._concurrency)

    def _measured(self, tokens: int, seconds: float) -> None:
        rate = tokens / max(seconds, 1e-6)
        self._rate = rate if self._rate is None else 0.8 * self._rate + 0.2 * rate

    async def submit(self, tenant: str, texts: Sequence[str]) -> Vectors:
        """The vectors of ``texts``, once the scheduler has run them for ``tenant``."""
        if not texts:
            return []
        future: asyncio.Future[Vectors] = asyncio.get_running_loop().create_future()
        deadline = current_deadline()
        if deadline is not None:
            deadline.watch(future)  # raises DeadlineExceeded if it has ended already
        job = _Job(tenant, list(texts), sum(self._cost(t) for t in texts), future)
        start = max(self._now, self._finish.get(tenant, 0))  # an idle tenant has no credit
        self._finish[tenant] = start + job.cost
        if len(self._finish) > 4096:  # forget tenants that are idle: they start at now anyway
            self._finish = {t: f for t, f in self._finish.items() if f > self._now}
        heapq.heappush(self._heap, (start, next(self._arrivals), job))
        self._waiting += 1
        self._waiting_tokens += job.cost
        if self._observe is not None:
            self._observe(1, job.cost)
        future.add_done_callback(lambda _: self._leave(job))
        self._pump()
        try:
            return await future
        except DeadlineExceeded as exc:
            if exc.retry_after is not None or self._rate is None:
                raise
            wait = (self._waiting_tokens + job.cost) / (self._rate * self._concurrency)
            raise DeadlineExceeded(str(exc), retry_after=wait) from None
        finally:
            if not future.done():  # the caller was cancelled: drop the job
                future.cancel()

    def _leave(self, job: _Job) -> None:
        if not job.taken:
            job.taken = True
            self._waiting -= 1
            self._waiting_tokens -= job.cost
            if self._observe is not None:
                self._observe(-1, -job.cost)

    def _take(self) -> list[_Job]:
        """The next batch: the jobs of the smallest start tags that fit (empty: none queued)."""
        batch: list[_Job] = []
        cost = texts = 0
        while self._heap:
            start, _, job = self._heap[0]
            if job.future.done():  # abandoned or cancelled: skip it, never embed it
                heapq.heappop(self._heap)
                continue
            full = cost + job.cost > self._quantum or texts + len(job.texts) > self._batch_texts
            if batch and full:
                break
            heapq.heappop(self._heap)
            self._leave(job)
            self._now = max(self._now, start)
            batch.append(job)
            cost += job.cost
            texts += len(job.texts)
        return batch

    def _pump(self) -> None:
        while self._running < self._concurrency:
            batch = self._take()
            if not batch:
                return
            self._running += 1
            task = asyncio.get_running_loop().create_task(self._run(batch))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _run(self, batch: list[_Job]) -> None:
        try:
            await self._embed(batch)
            if len(batch) > 1 and any(not j.future.done() for j in batch):
                for job in batch:  # the batch failed: each on its own
                    await self._embed([job])
        finally:
            for job in batch:  # interrupted (the loop is closing): no caller waits forever
                if not job.future.done():
                    job.future.set_exception(EmbeddingError("the embedding was interrupted"))
            self._running -= 1
            self._pump()

    async def _embed(self, jobs: list[_Job]) -> None:
        """Embed ``jobs`` in one call and settle their futures (a failed batch of several
        jobs leaves them pending, for :meth:`_run` to retry one by one)."""
        jobs = [j for j in jobs if not j.future.done()]
        if not jobs:
            return
        started = self._clock()
        try:
            vectors = await self._call([t for j in jobs for t in j.texts])
            if len(vectors) != sum(len(j.texts) for j in jobs):
                raise RuntimeError("the embedder returned a vector count unlike the texts'")
            self._measured(sum(j.cost for j in jobs), self._clock() - started)
        except Exception as exc:
            if len(jobs) == 1 and not jobs[0].future.done():
                jobs[0].future.set_exception(exc)
            return
        start = 0
        for job in jobs:
            end = start + len(job.texts)
            if not job.future.done():
                job.future.set_result(vectors[start:end])
            start = end


class FairEmbedder:
    """An :class:`~mongomem.adapters.embeddings.Embedder` whose calls go through fair schedulers.

    ``embed`` (stored texts) and ``embed_query`` (search queries) are two lanes,
    each a :class:`FairScheduler` over the tenant of the calling task
    (:data:`TENANT`). A query the inner embedder has cached is answered at once.
    ``inner`` may be a factory, called on first use (the model loads then);
    ``window`` is the tokens one text costs at most, when ``inner`` does not say
    (its ``MAX_TOKENS``). ``observe(lane)`` gives each lane's
    :data:`DepthObserver` (lanes ``"stored"`` and ``"query"``); ``clock`` times the
    model calls (for :attr:`expected_wait_s`).
    """

    def __init__(
        self,
        inner: Embedder | Callable[[], Embedder],
        *,
        window: int = 512,
        batch_texts: int = 16,
        concurrency: int = 1,
        observe: Callable[[str], DepthObserver] | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self._inner = inner if isinstance(inner, Embedder) else None
        self._make = None if isinstance(inner, Embedder) else inner
        self._window = int(getattr(inner, "MAX_TOKENS", window))

        def cost(text: str) -> int:
            return estimated_tokens(text, self._window)

        options: dict[str, Any] = {
            "cost": cost,
            "quantum": self._window,
            "batch_texts": batch_texts,
            "concurrency": concurrency,
            "clock": clock,
        }
        self.stored = FairScheduler(
            lambda texts: self.inner.embed(texts),
            observe=None if observe is None else observe("stored"),
            **options,
        )
        self.queries = FairScheduler(
            lambda texts: embed_queries(self.inner, texts),
            observe=None if observe is None else observe("query"),
            **options,
        )

    @property
    def inner(self) -> Embedder:
        """The embedder behind the queues (made on first use when given a factory)."""
        if self._inner is None:
            assert self._make is not None
            self._inner = self._make()
        return self._inner

    @property
    def name(self) -> str:
        return self.inner.name

    @property
    def dimensions(self) -> int:
        return self.inner.dimensions

    async def embed(self, texts: Sequence[str]) -> Vectors:
        return await self.stored.submit(TENANT.get(), texts)

    async def embed_query(self, texts: Sequence[str]) -> Vectors:
        cached = getattr(self.inner, "cached_queries", None)
        if cached is not None:
            found: Vectors | None = cached(texts)
            if found is not None:
                return found
        return await self.queries.submit(TENANT.get(), texts)

    @property
    def expected_wait_s(self) -> float | None:
        """The longer expected wait of the two lanes (:attr:`FairScheduler.expected_wait_s`)."""
        waits = [w for w in (self.stored.expected_wait_s, self.queries.expected_wait_s) if w]
        return max(waits) if waits else None

    async def close(self) -> None:
        close = getattr(self._inner, "close", None)
        if close is not None:
            await close()
