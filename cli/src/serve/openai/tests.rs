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
    let image = request(
        json!({"model": "m", "messages": [{"role": "user", "content": [
        {"type": "text", "text": "see"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]}]}),
    );
    let e = user_message(&image.messages[0], 0).unwrap_err();
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
    let tool = request(json!({"model": "m", "messages": [
        {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "42"}]}));
    let e = earlier_messages(&tool.messages).unwrap_err();
    assert_eq!(param(&e), "messages[0].tool_calls");
    let e = earlier_messages(&tool.messages[1..]).unwrap_err();
    assert_eq!(param(&e), "messages[0]");
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
