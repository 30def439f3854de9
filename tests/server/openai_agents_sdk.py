"""The OpenAI Agents SDK (PyPI `openai-agents`) as a real client of legio's OpenAI-compatible door.

Run by tests/server/agents_sdk.rs against a real server with scripted providers (LEGIO_BASE_URL,
LEGIO_TOKEN). For each of the SDK's two models (Chat Completions and Responses) it runs an
ordinary `Agent(instructions=...)` with a function tool and a `SQLiteSession`: a first turn in
which the agent calls the tool (the Rust side queued one call of `lookup` for agent `a` per
model), then a second turn on the same session (the SDK resends the whole history, tool
traffic included). On the Responses model a third turn chains with `previous_response_id`
instead of the session. Each check prints `ok NAME`; any failure raises.
"""

import asyncio
import os
import tempfile

from agents import (
    Agent,
    ModelSettings,
    OpenAIChatCompletionsModel,
    OpenAIResponsesModel,
    Runner,
    SQLiteSession,
    function_tool,
    set_tracing_disabled,
)
from openai import AsyncOpenAI

BASE = os.environ["LEGIO_BASE_URL"]
TOKEN = os.environ["LEGIO_TOKEN"]
INSTRUCTIONS = "Answer in one short line."

set_tracing_disabled(True)
client = AsyncOpenAI(base_url=BASE + "/v1", api_key=TOKEN, max_retries=0)
looked_up = []


@function_tool
def lookup(q: str) -> str:
    """Looks a fact up."""
    looked_up.append(q)
    return f"the fact about {q}"


def agent_on(model, conversation):
    return Agent(
        name="helper",
        instructions=INSTRUCTIONS,
        model=model,
        tools=[lookup],
        model_settings=ModelSettings(metadata={"conversation": conversation}),
    )


async def two_turns_on_a_session(name, model, conversation, db):
    agent = agent_on(model, conversation)
    session = SQLiteSession(conversation, db)
    before = len(looked_up)
    first = await Runner.run(agent, "look up x", session=session)
    assert len(looked_up) == before + 1, looked_up
    assert first.final_output.startswith("a read"), first.final_output
    second = await Runner.run(agent, "and now without tools", session=session)
    assert second.final_output.startswith("a read"), second.final_output
    items = await session.get_items()
    kinds = [i.get("type", "message") for i in items]
    assert "function_call" in kinds and "function_call_output" in kinds, kinds
    print(f"ok {name} session with a tool")
    return second


async def main():
    db = os.path.join(tempfile.mkdtemp(), "sessions.sqlite")
    chat = OpenAIChatCompletionsModel(model="legio/a", openai_client=client)
    await two_turns_on_a_session("chat", chat, "agents:chat", db)
    responses = OpenAIResponsesModel(model="legio/a", openai_client=client)
    second = await two_turns_on_a_session("responses", responses, "agents:responses", db)
    # No session: the log is the context, named by the previous response.
    agent = agent_on(responses, "agents:responses")
    third = await Runner.run(
        agent, "one more", previous_response_id=second.last_response_id
    )
    assert third.final_output.startswith("a read"), third.final_output
    print("ok responses previous_response_id")


asyncio.run(main())
