"""The official `openai` Python SDK as a real client of legio's OpenAI-compatible door.

Run by tests/server/sdk.rs against a real server with scripted providers (LEGIO_BASE_URL,
LEGIO_TOKEN); the Rust side queued one tool call for agent `a` (id sdk-call-1, tool `lookup`).
Each check prints `ok NAME`; any failure raises.
"""

import json
import os
import typing

import urllib.parse
import urllib.request

import openai
from openai.types.chat import (
    ChatCompletionAssistantMessageParam,
    ChatCompletionMessageParam,
    ChatCompletionSystemMessageParam,
    ChatCompletionToolMessageParam,
    ChatCompletionUserMessageParam,
)
from pydantic import TypeAdapter

BASE = os.environ["LEGIO_BASE_URL"]
TOKEN = os.environ["LEGIO_TOKEN"]
client = openai.OpenAI(base_url=BASE + "/v1", api_key=TOKEN, max_retries=0)


def conv(key):
    return {"conversation": key}


def models():
    ids = [m.id for m in client.models.list()]
    assert ids[0] == "legio" and "legio/a" in ids and "legio/b" in ids, ids
    assert client.models.retrieve("legio/a").id == "legio/a"
    print("ok models.list")


def chat_whole():
    first = client.chat.completions.create(
        model="legio", messages=[{"role": "user", "content": "hello"}], metadata=conv("sdk:chat")
    )
    choice = first.choices[0]
    assert choice.finish_reason == "stop", choice
    assert choice.message.role == "assistant" and choice.message.content.startswith("lead read"), choice
    assert first.usage.total_tokens > 0, first.usage
    # The history as the host kept it, plus the new message: only the new one is stored.
    second = client.chat.completions.create(
        model="legio",
        messages=[
            {"role": "user", "content": "hello"},
            {"role": "assistant", "content": choice.message.content},
            {"role": "user", "content": "again"},
        ],
        metadata=conv("sdk:chat"),
    )
    assert second.choices[0].message.content.startswith("lead read"), second
    print("ok chat.completions")


def chat_retried():
    # A host's retry with its Idempotency-Key (the SDK sends the header it is given): the
    # message is stored once and the retry gets the stored answer.
    asked = dict(
        model="legio",
        messages=[{"role": "user", "content": "only once"}],
        metadata=conv("sdk:retry"),
        extra_headers={"Idempotency-Key": "sdk-retry-1"},
    )
    first = client.chat.completions.create(**asked)
    again = client.chat.completions.create(**asked)
    assert again.choices[0].message.content == first.choices[0].message.content, (first, again)
    users = [m["content"] for m in history("sdk:retry", "full") if m["role"] == "user"]
    assert users == ["only once"], users
    try:
        client.chat.completions.create(**{**asked, "messages": [{"role": "user", "content": "other"}]})
        raise AssertionError("a key reused for another message must be refused")
    except openai.UnprocessableEntityError as e:
        assert e.code == "idempotency_key_reused", e
    print("ok chat.completions retried with an Idempotency-Key")


def chat_streamed():
    stream = client.chat.completions.create(
        model="legio/b",
        messages=[{"role": "user", "content": "stream please"}],
        metadata=conv("sdk:chat"),
        stream=True,
        stream_options={"include_usage": True},
    )
    text, finish, usage = "", None, None
    for chunk in stream:
        assert chunk.object == "chat.completion.chunk", chunk
        if chunk.usage:
            usage = chunk.usage
        for choice in chunk.choices:
            text += choice.delta.content or ""
            finish = choice.finish_reason or finish
    assert finish == "stop" and usage and usage.total_tokens > 0, (finish, usage)
    stored = history("sdk:chat", "full")[-1]["content"]
    assert text == stored, (text, stored)
    print("ok chat.completions stream")


def responses():
    first = client.responses.create(model="legio/b", input="hi", metadata=conv("sdk:resp"))
    assert first.output_text.startswith("b read"), first
    second = client.responses.create(model="legio/b", input="more", previous_response_id=first.id)
    assert second.output_text.startswith("b read") and second.id != first.id, second
    events = list(
        client.responses.create(
            model="legio/b", input="streamed", previous_response_id=second.id, stream=True
        )
    )
    kinds = [e.type for e in events]
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed", kinds
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert deltas == events[-1].response.output_text, (deltas, events[-1].response)
    users = [m["content"] for m in history("sdk:resp", "full") if m["role"] == "user"]
    assert users == ["hi", "more", "streamed"], users
    print("ok responses previous_response_id")


def responses_streamed():
    # The SDK's stream helper checks the events' order and that the response's and its items'
    # ids stay the same from start to end.
    with client.responses.stream(model="legio/b", input="stream it", metadata=conv("sdk:rstream")) as stream:
        text = "".join(e.delta for e in stream if e.type == "response.output_text.delta")
        final = stream.get_final_response()
    assert text and final.output_text == text, (final.output_text, text)
    stored = history("sdk:rstream", "full")[-1]["content"]
    assert text == stored, (text, stored)
    # A function call, streamed; its output in the next request, streamed too.
    tools = [
        {
            "type": "function",
            "name": "lookup",
            "description": "finds a fact",
            "parameters": {"type": "object", "properties": {"q": {"type": "string"}}},
            "strict": False,
        }
    ]
    with client.responses.stream(
        model="legio/a", input="look it up", tools=tools, metadata=conv("sdk:rtools")
    ) as stream:
        paused = stream.get_final_response()
    calls = [o for o in paused.output if o.type == "function_call"]
    assert [(c.call_id, c.name) for c in calls] == [("sdk-call-2", "lookup")], paused.output
    with client.responses.stream(
        model="legio/a",
        previous_response_id=paused.id,
        tools=tools,
        input=[{"type": "function_call_output", "call_id": "sdk-call-2", "output": "42"}],
    ) as stream:
        done = stream.get_final_response()
    assert done.output_text.startswith("a read"), done
    print("ok responses stream")


def host_tool():
    tools = [
        {
            "type": "function",
            "function": {
                "name": "lookup",
                "description": "finds a fact",
                "parameters": {"type": "object", "properties": {"q": {"type": "string"}}},
            },
        }
    ]
    messages = [{"role": "user", "content": "look it up"}]
    paused = client.chat.completions.create(
        model="legio/a", messages=messages, tools=tools, metadata=conv("sdk:tools")
    )
    choice = paused.choices[0]
    assert choice.finish_reason == "tool_calls", choice
    call = choice.message.tool_calls[0]
    assert (call.id, call.function.name, json.loads(call.function.arguments)) == (
        "sdk-call-1",
        "lookup",
        {"q": "x"},
    ), call
    messages.append(choice.message.model_dump(exclude_none=True))
    messages.append({"role": "tool", "tool_call_id": call.id, "content": "42"})
    done = client.chat.completions.create(
        model="legio/a", messages=messages, tools=tools, metadata=conv("sdk:tools")
    )
    assert done.choices[0].finish_reason == "stop", done
    assert done.choices[0].message.content.startswith("a read"), done
    print("ok host tool round-trip")


def errors():
    try:
        client.chat.completions.create(model="legio", messages=[{"role": "user", "content": "x"}])
        raise AssertionError("a request without metadata.conversation was accepted")
    except openai.BadRequestError as e:
        assert e.status_code == 400 and e.code == "missing_field", e
        assert e.param == "metadata.conversation" and e.type == "invalid_request_error", e
    try:
        client.chat.completions.create(
            model="gpt-4o", messages=[{"role": "user", "content": "x"}], metadata=conv("sdk:e")
        )
        raise AssertionError("an unknown model was accepted")
    except openai.NotFoundError as e:
        assert e.code == "unknown_model" and e.param == "model", e
    try:
        openai.OpenAI(base_url=BASE + "/v1", api_key="wrong", max_retries=0).models.list()
        raise AssertionError("a wrong token was accepted")
    except openai.AuthenticationError as e:
        assert e.type == "authentication_error", e
    print("ok error shape")


def history(key, view, agent=None):
    # The standard library's client: the SDK's own HTTP client changed between its versions.
    params = {"view": view}
    if agent:
        params["agent"] = agent
    request = urllib.request.Request(
        f"{BASE}/sessions/{key}/history?{urllib.parse.urlencode(params)}",
        headers={"Authorization": f"Bearer {TOKEN}"},
    )
    with urllib.request.urlopen(request) as response:
        return json.loads(response.read())


# legio's exact record beside the OpenAI fields (docs/http-api.md).
LEGIO_FIELDS = {"id", "seq", "sender", "audience", "reply_to", "at", "parts", "redelivered", "summary", "covers_up_to"}
BY_ROLE = {
    "system": ChatCompletionSystemMessageParam,
    "user": ChatCompletionUserMessageParam,
    "assistant": ChatCompletionAssistantMessageParam,
    "tool": ChatCompletionToolMessageParam,
}


def check_messages(array, what):
    TypeAdapter(typing.List[ChatCompletionMessageParam]).validate_python(array)
    calls = set()
    for i, message in enumerate(array):
        kind = BY_ROLE[message["role"]]
        keys = set(message) - LEGIO_FIELDS
        allowed = kind.__required_keys__ | kind.__optional_keys__
        assert kind.__required_keys__ <= keys <= allowed, (what, i, keys - allowed, message)
        TypeAdapter(kind).validate_python({k: message[k] for k in keys})
        for call in message.get("tool_calls", []):
            calls.add(call["id"])
        if message["role"] == "tool":
            assert message["tool_call_id"] in calls, (what, i, "a tool result before its call")


def history_views():
    for agent in [None, "lead", "a"]:
        for view in ["full", "compacted", "next"]:
            array = history("sdk:tools", view, agent)
            assert array, (view, agent)
            check_messages(array, f"view={view} agent={agent}")
    lead = history("sdk:tools", "full", "lead")
    assert any("[tool call lookup id=sdk-call-1]" in m["content"] for m in lead), lead
    print("ok history as Message[]")


if __name__ == "__main__":
    print("openai", openai.__version__)
    models()
    chat_whole()
    chat_retried()
    chat_streamed()
    responses()
    host_tool()
    responses_streamed()
    errors()
    history_views()
