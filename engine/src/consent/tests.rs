//! The policy's decisions on reads and tool calls.

#![allow(clippy::unwrap_used)]

use super::*;

fn policy(rules: Vec<ConsentRule>) -> ConsentPolicy {
    ConsentPolicy::new(ConsentConfig {
        rules,
        ..ConsentConfig::default()
    })
    .unwrap()
}

fn rule(
    server: Option<&str>,
    uri: &str,
    host: Option<Decision>,
    model: Option<Decision>,
) -> ConsentRule {
    ConsentRule {
        server: server.map(str::to_owned),
        uri: Some(uri.into()),
        host,
        model,
        tool: None,
        call: None,
    }
}

fn call_rule(server: Option<&str>, tool: Option<&str>, call: Decision) -> ConsentRule {
    ConsentRule {
        server: server.map(str::to_owned),
        uri: None,
        host: None,
        model: None,
        tool: tool.map(str::to_owned),
        call: Some(call),
    }
}

#[test]
fn tool_calls_follow_call_rules_then_the_annotations() {
    use hostpipe_core::ToolHints;
    let p = policy(vec![
        call_rule(Some("fs"), Some("write_*"), Decision::Deny),
        call_rule(None, Some("search"), Decision::Allow),
        rule(Some("fs"), "file:///*", Some(Decision::Allow), None),
    ]);
    let none = ToolHints::default();
    let read_only = ToolHints {
        read_only: Some(true),
        destructive: None,
    };
    let destructive = ToolHints {
        read_only: Some(false),
        destructive: Some(true),
    };
    assert_eq!(
        p.decide_call("fs", "write_file", read_only),
        (Decision::Deny, DecidedBy::Rule(0))
    );
    assert_eq!(
        p.decide_call("kb", "write_file", none),
        (Decision::Allow, DecidedBy::Default)
    );
    assert_eq!(
        p.decide_call("kb", "search", destructive),
        (Decision::Allow, DecidedBy::Rule(1))
    );
    assert_eq!(
        p.decide_call("kb", "drop", destructive),
        (Decision::Ask, DecidedBy::DestructiveTool)
    );
    assert_eq!(
        p.decide_call("kb", "list", read_only),
        (Decision::Allow, DecidedBy::ReadOnlyTool)
    );
    // A read rule never decides a call, nor a call rule a read.
    assert_eq!(
        p.decide("fs", "file:///x", ReadOrigin::Host).1,
        DecidedBy::Rule(2)
    );
    assert_eq!(
        p.decide("fs", "write_x", ReadOrigin::Host).1,
        DecidedBy::Default
    );
    assert_eq!(
        p.describe(DecidedBy::Rule(0), Subject::Call),
        "rules[0] (server fs, tool write_*)"
    );
}

#[test]
fn call_rules_are_checked() {
    let err = |r: ConsentRule| {
        ConsentPolicy::new(ConsentConfig {
            rules: vec![r],
            ..ConsentConfig::default()
        })
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default()
    };
    assert!(
        err(ConsentRule {
            host: Some(Decision::Allow),
            ..call_rule(None, Some("x"), Decision::Deny)
        })
        .contains("a rule with `tool` is about tool calls")
    );
    assert!(
        err(ConsentRule {
            uri: Some("kb://*".into()),
            ..call_rule(None, None, Decision::Deny)
        })
        .contains("a rule with `uri` is about reads")
    );
    assert!(err(call_rule(None, Some("["), Decision::Deny)).contains("rules[0].tool"));
}

#[test]
fn first_matching_rule_for_the_origin_decides() {
    let p = policy(vec![
        rule(
            Some("kb"),
            "kb://secret/*",
            Some(Decision::Deny),
            Some(Decision::Deny),
        ),
        rule(None, "kb://public/*", None, Some(Decision::Ask)),
        rule(None, "*", None, Some(Decision::Deny)),
    ]);
    let d = |s: &str, u: &str, o| p.decide(s, u, o);
    assert_eq!(
        d("kb", "kb://secret/plan", ReadOrigin::Host),
        (Decision::Deny, DecidedBy::Rule(0))
    );
    assert_eq!(
        d("kb", "kb://secret/a/b", ReadOrigin::Model),
        (Decision::Deny, DecidedBy::Rule(0))
    );
    // Another server: the first rule does not apply.
    assert_eq!(
        d("other", "kb://secret/plan", ReadOrigin::Host),
        (Decision::Allow, DecidedBy::Default)
    );
    assert_eq!(
        d("kb", "kb://public/x", ReadOrigin::Model),
        (Decision::Ask, DecidedBy::Rule(1))
    );
    assert_eq!(
        d("kb", "kb://public/x", ReadOrigin::Host),
        (Decision::Allow, DecidedBy::Default)
    );
    assert_eq!(
        d("kb", "kb://else", ReadOrigin::Model),
        (Decision::Deny, DecidedBy::Rule(2))
    );
    // A glob is anchored: a prefix does not match.
    assert_eq!(
        d("kb", "xkb://secret/plan", ReadOrigin::Host).1,
        DecidedBy::Default
    );
}

#[test]
fn an_encoded_or_dotted_uri_is_judged_as_the_server_reads_it() {
    let p = policy(vec![rule(
        Some("kb"),
        "kb://secret/*",
        Some(Decision::Deny),
        Some(Decision::Deny),
    )]);
    for uri in [
        "kb://%73ecret/plan",
        "KB://secret/plan",
        "kb://public/../secret/plan",
        "kb://secret%2Fplan",
        "kb://./secret/plan",
    ] {
        assert_eq!(
            p.decide("kb", uri, ReadOrigin::Host).0,
            Decision::Deny,
            "{uri}"
        );
    }
    assert_eq!(
        p.decide("kb", "kb://public/plan", ReadOrigin::Host).0,
        Decision::Allow
    );
    assert_eq!(
        normalize_uri("KB://h/a/./b/../c%20d?x=%41"),
        "kb://h/a/c d?x=A"
    );
}

#[test]
fn bad_rules_are_config_errors() {
    let e = ConsentPolicy::new(ConsentConfig {
        rules: vec![rule(None, "kb://[", Some(Decision::Deny), None)],
        ..ConsentConfig::default()
    })
    .unwrap_err();
    assert_eq!(
        e.to_string(),
        "rules[0].uri: `kb://[` is not a valid glob: unclosed character class; missing ']'"
    );
    let e = ConsentPolicy::new(ConsentConfig {
        rules: vec![rule(None, "*", None, None)],
        ..ConsentConfig::default()
    })
    .unwrap_err();
    assert!(
        e.to_string()
            .starts_with("rules[0]: the rule decides nothing"),
        "{e}"
    );
}
