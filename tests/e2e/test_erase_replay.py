"""Erasure is replay-proof (SPEC J3), with the whole pipeline as processes.

Traffic of three users flows; one of them is erased with ``mongomem erase user``
while the others keep talking (and the erased user's client keeps trying) and the
windowing stage is SIGKILLed mid-erase. Then the turns topic is replayed from offset 0
in a new group: the erased user has zero documents in every collection (their stored
extraction answers included), and the two others have exactly what they had before the
replay, which asked the LLM nothing (every answer was stored).
"""

from __future__ import annotations

import asyncio
import subprocess
import sys

import pytest

from mongomem.adapters.mongo import EXTRACTIONS, SNAPSHOTS
from mongomem.erasure.register import ERASURES
from mongomem.errors import Erased
from mongomem.operations.usage import LLM_USAGE
from mongomem.sdk import AsyncMemory, MemoryRequestContext
from mongomem.testing.harness import (
    Pipeline,
    client,
    wait_until,
)

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

PROJECT = "erase-proj"
GONE = "u-ana"
KEPT = ("u-bob", "u-cyd")

SESSION_ONE = [
    ("user", "Hi there, I am planning a trip."),
    ("assistant", "Happy to help. Where do you fly from?"),
    ("user", "My home airport is Boston."),
    ("assistant", "Noted."),
    ("user", "In airline terms, a red-eye means an overnight flight that lands the next morning."),
    ("assistant", "Got it."),
    ("user", "Thanks."),
]
SESSION_TWO = [
    ("user", "My seat preference is aisle."),
    ("assistant", "Aisle it is."),
    ("user", "Anything else you need?"),
    ("assistant", "No, that is all."),
]


#: The pipeline's topic prefix and database (the erase command names its changelog group).
PIPELINE_NAME = "erase"


async def talk(memory: AsyncMemory, user: str, session: str, turns: list[tuple[str, str]]) -> int:
    """Record ``turns``; how many were refused because the user was erased."""
    chat = memory.bind(MemoryRequestContext(user_id=user, session_id=session))
    refused = 0
    for role, content in turns:
        try:
            await chat.record_turn(role, content)
        except Erased:
            refused += 1
        await asyncio.sleep(0.1)
    return refused


async def per_collection(pipe: Pipeline, user: str) -> dict[str, int]:
    """Documents per collection that belong to ``user`` (by any field or evidence)."""
    async with client(pipe) as mongo:
        db = mongo[pipe.database]
        snapshots = {d["_id"]: d["user_id"] async for d in db[SNAPSHOTS].find({}, {"user_id": 1})}
        out: dict[str, int] = {}
        for name in sorted(await db.list_collection_names()):
            if name == ERASURES:
                continue
            n = 0
            async for doc in db[name].find({}, {"embedding": 0}):
                if user in repr(doc):
                    n += 1
                elif name == LLM_USAGE and doc.get("snapshot_id") not in snapshots:
                    n += user == GONE  # usage of a snapshot that is gone counts as the erased's
            out[name] = n
        return out


async def answers_stored(pipe: Pipeline) -> int:
    async with client(pipe) as mongo:
        return await mongo[pipe.database][EXTRACTIONS].count_documents({})


async def learned(memory: AsyncMemory, user: str) -> bool | str:
    chat = memory.bind(MemoryRequestContext(user_id=user))
    airport = await chat.get_semantic("home-airport")
    seat = await chat.get_semantic("seat-preference")
    if airport is None or seat is None:
        return f"{user}: airport {airport is not None}, seat {seat is not None}"
    return True


async def settled(pipe: Pipeline, memory: AsyncMemory) -> None:
    async def done() -> bool | str:
        for user in KEPT:
            state = await learned(memory, user)
            if state is not True:
                return state
        lag = await pipe.lag()
        return True if lag == 0 else f"lag {lag}"

    await wait_until(done, 240, "the kept users' memories and zero lag", every=1.0)


async def test_erase_during_traffic_then_replay_from_zero_brings_nothing_back(
    pipeline: Pipeline,
) -> None:
    memory = AsyncMemory(project_id=PROJECT, settings=pipeline.settings)
    try:
        users = (GONE, *KEPT)
        await asyncio.gather(*(talk(memory, u, "s1", SESSION_ONE) for u in users))

        async def gone_learned() -> bool | str:
            return await _has_airport(memory, GONE)

        await wait_until(gone_learned, 240, "the erased user's first memories", every=1.0)
        async with client(pipeline) as mongo:  # SPEC I6: stored answers are derived data too
            stored_before = await mongo[pipeline.database][EXTRACTIONS].count_documents(
                {"user_id": GONE}
            )
        assert stored_before > 0  # ... so the erasure has them to remove (checked below)

        async def erase_now() -> subprocess.CompletedProcess[bytes]:
            await asyncio.sleep(0.3)  # the second sessions are flowing
            cmd = [
                sys.executable,
                "-m",
                "mongomem.cli",
                "erase",
                "user",
                "--project-id",
                PROJECT,
                "--user-id",
                GONE,
                "--yes",
                "--changelog-group",
                "erase.windowing-replay",
            ]
            erasing = asyncio.create_task(
                asyncio.to_thread(
                    subprocess.run,
                    cmd,
                    env=pipeline.env(),
                    capture_output=True,
                    timeout=240,
                    check=False,
                )
            )
            await asyncio.sleep(0.2)
            await asyncio.to_thread(pipeline.kill, "windowing")  # mid-erase
            await asyncio.to_thread(pipeline.restart, "windowing")
            return await erasing

        async def keep_talking() -> int:
            """The erased user's client talks on until it is refused; turns it got in."""
            chat = memory.bind(MemoryRequestContext(user_id=GONE, session_id="s2"))
            for n in range(600):
                try:
                    await chat.record_turn("user", f"My seat preference is aisle ({n}).")
                except Erased:
                    return n
                await asyncio.sleep(0.1)
            raise AssertionError("never refused")

        traffic = [talk(memory, u, "s2", SESSION_TWO) for u in KEPT]
        erasing, talking = asyncio.ensure_future(erase_now()), asyncio.ensure_future(keep_talking())
        await asyncio.gather(erasing, talking, *traffic)
        erased, got_in = erasing.result(), talking.result()
        assert erased.returncode == 0, erased.stderr.decode()[-3000:]
        assert b"erased user" in erased.stdout
        pipeline.revive_exited()
        await settled(pipeline, memory)
        await asyncio.sleep(3)  # anything of the erased user still in flight lands (or not)
        await settled(pipeline, memory)

        assert {k: v for k, v in (await per_collection(pipeline, GONE)).items() if v} == {}
        kept = {u: await per_collection(pipeline, u) for u in KEPT}
        assert all(v["turns"] == len(SESSION_ONE) + len(SESSION_TWO) for v in kept.values())
        assert all(v["snapshots"] > 0 and v["memories"] > 0 for v in kept.values())
        assert got_in > 0  # it was talking while the erasure ran, then was refused

        asked = len(pipeline.llm.chat_requests)
        stored = await answers_stored(pipeline)
        await pipeline.replay_windowing()
        await settled(pipeline, memory)
        await asyncio.sleep(3)  # let anything the replay republished go through
        await settled(pipeline, memory)
        # SPEC I6: the republished snapshots reuse their stored answers: no LLM request
        assert len(pipeline.llm.chat_requests) == asked
        assert await answers_stored(pipeline) == stored

        assert {k: v for k, v in (await per_collection(pipeline, GONE)).items() if v} == {}
        assert {u: await per_collection(pipeline, u) for u in KEPT} == kept
    finally:
        await memory.close()


async def _has_airport(memory: AsyncMemory, user: str) -> bool | str:
    chat = memory.bind(MemoryRequestContext(user_id=user))
    found = await chat.get_semantic("home-airport")
    return True if found is not None else f"{user} has no home-airport yet"
