//! Requests into turns: the conversation id's sources, the messages, what is refused.

#![allow(clippy::unwrap_used, clippy::panic)]

use axum::http::HeaderMap;
use serde_json::json;

use super::wire::ChatRequest;
use super::*;

fn request(body: serde_json::Value) -> ChatRequest {
    serde_json::from_value(body).unwrap()
}

fn param(e: &OpenAiError) -> serde_json::Value {
    e.body()["error"]["param"].clone()
}

#[test]
fn the_conversation_id_is_the_header_then_metadata_then_user() {
    let all = request(json!({"model": "m", "messages": [], "user": "u",
        "metadata": {"conversation_id": "meta"}}));
    let mut headers = HeaderMap::new();
    assert_eq!(
        conversation_id(&headers, &all).unwrap().as_deref(),
        Some("meta")
    );
    headers.insert("x-conversation-id", "head".parse().unwrap());
    assert_eq!(
        conversation_id(&headers, &all).unwrap().as_deref(),
        Some("head")
    );
    let user = request(json!({"model": "m", "messages": [], "user": "u"}));
    assert_eq!(
        conversation_id(&HeaderMap::new(), &user)
            .unwrap()
            .as_deref(),
        Some("u")
    );
    let none = request(json!({"model": "m", "messages": []}));
    assert_eq!(conversation_id(&HeaderMap::new(), &none).unwrap(), None);
    let blank =
        request(json!({"model": "m", "messages": [], "metadata": {"conversation_id": " "}}));
    let e = conversation_id(&HeaderMap::new(), &blank).unwrap_err();
    assert_eq!(param(&e), "metadata.conversation_id");
}

#[test]
fn earlier_messages_are_the_system_texts_and_the_history() {
    let r = request(json!({"model": "m", "messages": [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
        {"role": "assistant", "content": "c", "refusal": null},
        {"role": "developer", "content": "no emoji"},
        {"role": "user", "content": "last"},
    ], "temperature": 0.3}));
    assert!(r.ignored.contains_key("temperature"));
    let (last, earlier) = r.messages.split_last().unwrap();
    let (system, history) = earlier_messages(earlier).unwrap();
    assert_eq!(system, ["be brief", "no emoji"]);
    assert_eq!(history.len(), 2);
    assert_eq!(
        (history[0].role, history[0].text.as_str()),
        (Role::User, "a\nb")
    );
    assert_eq!(
        (history[1].role, history[1].text.as_str()),
        (Role::Assistant, "c")
    );
    assert_eq!(user_message(last, 4).unwrap(), "last");
}

#[test]
fn what_a_turn_cannot_carry_is_refused_naming_the_field() {
    let audio = request(
        json!({"model": "m", "messages": [{"role": "user", "content": [
        {"type": "text", "text": "hear"},
        {"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}}]}]}),
    );
    let e = user_message(&audio.messages[0], 0).unwrap_err();
    assert_eq!(param(&e), "messages[0].content[1]");
    let assistant_last =
        request(json!({"model": "m", "messages": [{"role": "assistant", "content": "x"}]}));
    let e = user_message(&assistant_last.messages[0], 0).unwrap_err();
    assert_eq!(param(&e), "messages[0]");
    let blank = request(json!({"model": "m", "messages": [{"role": "user", "content": "  "}]}));
    assert_eq!(
        param(&user_message(&blank.messages[0], 0).unwrap_err()),
        "messages[0].content"
    );
    // Earlier turns' tool exchanges leave the history; their text answers stay.
    let earlier = request(json!({"model": "m", "messages": [
        {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "42"},
        {"role": "assistant", "content": "it is 42"}]}));
    let (_, history) = earlier_messages(&earlier.messages).unwrap();
    assert_eq!(history.len(), 1);
    assert_eq!(history[0].text, "it is 42");
    // A role that is not one: the body does not parse.
    let bad: Result<ChatRequest, _> = serde_json::from_value(
        json!({"model": "m", "messages": [{"role": "robot", "content": "x"}]}),
    );
    assert!(bad.is_err());
}

#[test]
fn errors_have_openai_types_by_status() {
    let kind = |status: StatusCode| {
        OpenAiError::from(ApiError::new(status, "x", "m")).body()["error"]["type"].clone()
    };
    assert_eq!(kind(StatusCode::BAD_REQUEST), "invalid_request_error");
    assert_eq!(kind(StatusCode::NOT_FOUND), "invalid_request_error");
    assert_eq!(kind(StatusCode::UNAUTHORIZED), "authentication_error");
    assert_eq!(kind(StatusCode::FORBIDDEN), "permission_error");
    assert_eq!(kind(StatusCode::TOO_MANY_REQUESTS), "rate_limit_error");
    assert_eq!(kind(StatusCode::BAD_GATEWAY), "server_error");
    let limited = OpenAiError::from(ApiError::new(StatusCode::TOO_MANY_REQUESTS, "r", "m"))
        .retry_after(std::time::Duration::from_millis(1500))
        .into_response();
    assert_eq!(limited.headers()["retry-after"], "2");
}

#[test]
fn caller_tools_are_namespaced_and_their_rounds_checked() {
    let r = request(json!({"model": "m", "tools": [
        {"type": "function", "function": {"name": "lookup", "description": "Looks up", "parameters": {"type": "object"}}},
        {"type": "function", "function": {"name": "now"}}],
        "messages": [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": null, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "lookup", "arguments": "{\"q\":1}"}},
            {"id": "c2", "type": "function", "function": {"name": "now", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "one"},
        {"role": "tool", "tool_call_id": "c2", "content": [{"type": "text", "text": "two"}]}]}));
    let offered = tools::offered(&r.tools).unwrap();
    let names: Vec<&str> = offered.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["caller__lookup", "caller__now"]);
    assert_eq!(offered[1].input_schema["type"], "object");
    let rounds = tools::rounds(&r.messages[1..], 1, &offered).unwrap();
    assert_eq!(rounds.len(), 1);
    assert_eq!(rounds[0].calls[0].name, "caller__lookup");
    assert_eq!(rounds[0].calls[0].arguments, "{\"q\":1}");
    assert_eq!(rounds[0].results[1].text, "two");
    // A call of a tool the request does not give, a result for no call, a last
    // assistant message without calls.
    let unknown = request(json!({"model": "m", "messages": [
        {"role": "assistant", "content": null, "tool_calls": [{"id": "c9", "type": "function", "function": {"name": "rm", "arguments": "{}"}}]}]}));
    let e = tools::rounds(&unknown.messages, 3, &offered).unwrap_err();
    assert_eq!(param(&e), "messages[3].tool_calls[0].function.name");
    let stray = request(
        json!({"model": "m", "messages": [{"role": "tool", "tool_call_id": "c1", "content": "x"}]}),
    );
    assert_eq!(
        param(&tools::rounds(&stray.messages, 1, &offered).unwrap_err()),
        "messages[1].tool_call_id"
    );
    let answer =
        request(json!({"model": "m", "messages": [{"role": "assistant", "content": "hi"}]}));
    assert_eq!(
        param(&tools::rounds(&answer.messages, 1, &offered).unwrap_err()),
        "messages[1]"
    );
    // Names the reference refuses, or too long for the prefix; a tool given twice.
    for (tools, field) in [
        (
            json!([{"type": "function", "function": {"name": "a b"}}]),
            "tools[0].function.name",
        ),
        (
            json!([{"type": "function", "function": {"name": "x".repeat(57)}}]),
            "tools[0].function.name",
        ),
        (
            json!([{"type": "function", "function": {"name": "a"}}, {"type": "function", "function": {"name": "a"}}]),
            "tools[1].function.name",
        ),
        (
            json!([{"type": "web_search", "function": {"name": "a"}}]),
            "tools[0].type",
        ),
        (
            json!([{"type": "function", "function": {"name": "a", "parameters": []}}]),
            "tools[0].function.parameters",
        ),
    ] {
        let r = request(json!({"model": "m", "messages": [], "tools": tools}));
        assert_eq!(param(&tools::offered(&r.tools).unwrap_err()), field);
    }
}

#[test]
fn image_parts_take_base64_data_urls_of_image_types_only() {
    let content = |url: &str| -> Content {
        serde_json::from_value(json!([
            {"type": "text", "text": "look"},
            {"type": "image_url", "image_url": {"url": url}}
        ]))
        .unwrap()
    };
    let got = images_of(&content("data:image/PNG;base64,iVBORw0KGgo="), "m").unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].mime_type, "image/png");
    assert_eq!(got[0].data, b"\x89PNG\r\n\x1a\n");
    // The text of the same content leaves the image out.
    assert_eq!(
        text_of(&content("data:image/png;base64,AA=="), "m").unwrap(),
        "look"
    );
    for (url, says) in [
        ("https://example.invalid/a.png", "only `data:` URLs"),
        ("data:image/png,rawbytes", "must be base64"),
        (
            "data:text/plain;base64,aGk=",
            "`text/plain` is not an image type",
        ),
        ("data:image/png;base64,not base64!", "does not decode"),
        ("data:image/png;base64", "needs a comma"),
    ] {
        let e = images_of(&content(url), "messages[0].content").unwrap_err();
        assert_eq!(param(&e), "messages[0].content[1].image_url.url", "{url}");
        let message = e.body()["error"]["message"].as_str().unwrap().to_owned();
        assert!(message.contains(says), "{url}: {message}");
    }
}
