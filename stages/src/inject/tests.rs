//! The injection path end to end on a fake MCP source (`hostpipe_engine::testkit`): no node,
//! no Python.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::Cursor;
use std::sync::Arc;

use hostpipe_core::{
    Attachment, AttachmentTarget, BlockBody, BoundServer, BuildContext, FallbackReason, McpSource,
    ModelProfile, ReadOutcome, ReadRecord, ResourceContents, Scope, ServerStatus, Stage,
    StageOutcome, Treatment, Turn,
};
use hostpipe_engine::{Consent, ConsentConfig, ConsentPolicy, ConsentRule, Decision};

use super::{AttachmentConfig, InjectConfig, ResourceContextInjection};
use hostpipe_engine::testkit::FakeSource;

/// A handbook of `sections` sections about `topic`, the last one answering where
/// visitors park.
fn handbook(topic: &str, sections: usize) -> String {
    let mut s = format!("# {topic} handbook\n\nThis handbook covers {topic}.\n\n");
    for k in 0..sections {
        let _ = write!(
            s,
            "## {topic} part {k}\n\nThe {topic} team reviews item {} every week. Reports about \
             {topic} go to the shared folder, and questions go to the channel of the team. \
             Meetings about {topic} take place on floor {}.\n\n",
            k * 31,
            k % 7
        );
    }
    s.push_str(
        "## Visitor parking\n\nVisitors park in lot Q7 behind the greenhouse; the gate code \
         is 4417.\n",
    );
    s
}

fn png(w: u32, h: u32) -> Vec<u8> {
    let mut out = Vec::new();
    image::RgbImage::new(w, h)
        .write_to(&mut Cursor::new(&mut out), image::ImageFormat::Png)
        .unwrap();
    out
}

const SHORT: &str = "# Release notes\n\nVersion 2 adds resource templates.\n";

/// Servers `kb` (texts, a blob, an image, a template, a failing read) and `secret`.
fn source() -> Arc<FakeSource> {
    Arc::new(
        FakeSource::new()
            .with_text("kb", "kb://notes.md", "text/markdown", SHORT)
            .with_text(
                "kb",
                "kb://handbook.md",
                "text/markdown",
                &handbook("facilities", 60),
            )
            .with_blob(
                "kb",
                "kb://archive.zip",
                "application/zip",
                vec![0x50, 0x4b, 3, 4, 0, 0xff, 0xfe],
            )
            .with_blob("kb", "kb://chart.png", "image/png", png(4, 3))
            .with_template("kb", "kb://tickets/{id}", "text/plain", |uri| {
                let id = uri.strip_prefix("kb://tickets/")?;
                Some(ResourceContents::Text {
                    uri: uri.to_owned(),
                    mime_type: Some("text/plain".into()),
                    text: format!("Ticket {id}: the printer on floor 3 is jammed."),
                })
            })
            .with_failing("kb", "kb://broken.md", -32603, "disk on fire")
            .with_text(
                "secret",
                "secret://plan.md",
                "text/markdown",
                "# Plan\n\nThe launch code is 7731.\n",
            ),
    )
}

fn uri(server: &str, uri: &str) -> AttachmentConfig {
    AttachmentConfig {
        server: server.into(),
        uri: Some(uri.into()),
        template: None,
        arguments: BTreeMap::new(),
        strategy: None,
        must: false,
    }
}

fn stage(mcp: Arc<FakeSource>, config: InjectConfig) -> ResourceContextInjection {
    let ctx = BuildContext {
        pipeline_id: "p".into(),
        mcp: mcp as Arc<dyn McpSource>,
        model: Arc::new(ModelProfile::default()),
        summarizers: BTreeMap::new(),
        embedders: BTreeMap::new(),
        rerankers: BTreeMap::new(),
    };
    ResourceContextInjection::new(config, &ctx).unwrap()
}

/// A turn asking `message`, with `kb` and `secret` bound.
fn deny(rule: ConsentRule) -> Arc<dyn hostpipe_core::ConsentGate> {
    let policy = ConsentPolicy::new(ConsentConfig {
        rules: vec![rule],
        ..ConsentConfig::default()
    })
    .unwrap();
    Arc::new(Consent::new(policy, None))
}

fn turn(message: &str) -> Turn {
    let mut turn = Turn::new("p", message);
    turn.bound_servers = ["kb", "secret"]
        .into_iter()
        .map(|name| BoundServer {
            name: name.into(),
            required: false,
            status: ServerStatus::Connected,
        })
        .collect();
    turn
}

/// Runs the stage over `turn`; the turn must go on.
async fn run(stage: &ResourceContextInjection, turn: &mut Turn) {
    let outcome = stage.process(turn).await.unwrap();
    assert!(matches!(outcome, StageOutcome::Continue));
}

fn reads(turn: &Turn) -> Vec<&ReadRecord> {
    turn.trace.reads().collect()
}

fn read_of<'a>(turn: &'a Turn, uri: &str) -> &'a ReadRecord {
    turn.trace
        .reads()
        .find(|r| r.uri == uri)
        .unwrap_or_else(|| panic!("no read of {uri}: {:?}", reads(turn)))
}

fn text_of<'a>(turn: &'a Turn, uri: &str) -> &'a str {
    turn.context
        .iter()
        .find(|b| b.source.uri == uri)
        .and_then(|b| b.text())
        .unwrap_or_else(|| panic!("no text block of {uri}: {:?}", turn.context))
}

/// A caller's budget (the MCP door's `fit_context`) takes the place of the pipeline's:
/// a larger one keeps what the pipeline's would cut, and 0 reads nothing.
#[tokio::test]
async fn a_callers_budget_overrides_the_pipelines() {
    let config = InjectConfig {
        budget_tokens: Some(5),
        attachments: vec![uri("kb", "kb://notes.md")],
        ..InjectConfig::default()
    };
    let stage = stage(source(), config);
    let mut larger = turn("What does version 2 add?");
    larger
        .extensions
        .insert(hostpipe_core::BudgetOverride(1000));
    run(&stage, &mut larger).await;
    assert_eq!(larger.context_budget, Some(1000));
    assert_eq!(text_of(&larger, "kb://notes.md"), SHORT);

    let mut none = turn("What does version 2 add?");
    none.extensions.insert(hostpipe_core::BudgetOverride(0));
    run(&stage, &mut none).await;
    assert_eq!(none.context_budget, Some(0));
    assert!(none.context.is_empty(), "{:?}", none.context);
}

#[tokio::test]
async fn a_document_that_fits_goes_in_whole() {
    let stage = stage(
        source(),
        InjectConfig {
            budget_tokens: Some(1000),
            attachments: vec![uri("kb", "kb://notes.md")],
            ..InjectConfig::default()
        },
    );
    let mut turn = turn("What does version 2 add?");
    run(&stage, &mut turn).await;
    assert_eq!(turn.context_budget, Some(1000));
    assert_eq!(turn.context.len(), 1);
    assert_eq!(text_of(&turn, "kb://notes.md"), SHORT);
    let r = read_of(&turn, "kb://notes.md");
    assert_eq!(r.outcome, ReadOutcome::Read);
    assert_eq!(r.treatment, Treatment::Whole);
    assert_eq!(r.error, None);
    assert_eq!(r.bytes, SHORT.len());
    assert_eq!(r.mime_type.as_deref(), Some("text/markdown"));
    assert_eq!(r.scope, Scope::Pipeline);
    assert!(
        r.tokens_after > 0 && r.tokens_after == r.tokens_before,
        "{r:?}"
    );
}

#[tokio::test]
async fn over_budget_the_passage_that_answers_is_kept() {
    let mcp = source();
    let stage = stage(
        Arc::clone(&mcp),
        InjectConfig {
            budget_tokens: Some(300),
            attachments: vec![uri("kb", "kb://handbook.md"), uri("kb", "kb://notes.md")],
            ..InjectConfig::default()
        },
    );
    let mut turn = turn("Where do visitors park, and what is the gate code?");
    run(&stage, &mut turn).await;
    let text = text_of(&turn, "kb://handbook.md");
    assert!(text.contains("the gate code is 4417"), "{text}");
    let r = read_of(&turn, "kb://handbook.md");
    assert!(matches!(r.treatment, Treatment::Chunked { .. }), "{r:?}");
    assert!(r.tokens_before > 300, "{r:?}");
    assert!(
        r.passages
            .iter()
            .any(|p| p.heading.ends_with("Visitor parking")),
        "{:?}",
        r.passages
    );
    let injected: usize = turn.context.iter().map(|b| b.tokens_after).sum();
    assert!(injected <= 300, "{injected}");
    assert_eq!(mcp.reads().len(), 2);
}

#[tokio::test]
async fn a_template_a_blob_and_an_image_are_read_and_converted() {
    let stage = stage(
        source(),
        InjectConfig {
            budget_tokens: Some(2000),
            attachments: vec![
                AttachmentConfig {
                    template: Some("kb://tickets/{id}".into()),
                    uri: None,
                    arguments: BTreeMap::from([(
                        "id".into(),
                        hostpipe_core::ArgumentValue::Literal("42".into()),
                    )]),
                    ..uri("kb", "")
                },
                uri("kb", "kb://archive.zip"),
                uri("kb", "kb://chart.png"),
            ],
            ..InjectConfig::default()
        },
    );
    let mut turn = turn("Is the printer fixed?");
    run(&stage, &mut turn).await;
    assert_eq!(
        text_of(&turn, "kb://tickets/42"),
        "Ticket 42: the printer on floor 3 is jammed."
    );
    let ticket = turn
        .context
        .iter()
        .find(|b| b.source.uri == "kb://tickets/42")
        .unwrap();
    assert_eq!(
        ticket
            .source
            .template
            .as_ref()
            .map(|t| t.uri_template.as_str()),
        Some("kb://tickets/{id}")
    );
    let zip = turn
        .context
        .iter()
        .find(|b| b.source.uri == "kb://archive.zip")
        .unwrap();
    assert!(
        matches!(&zip.body, BlockBody::Fallback { reason: FallbackReason::Binary, note } if !note.contains("UEsD")),
        "{zip:?}"
    );
    let chart = turn
        .context
        .iter()
        .find(|b| b.source.uri == "kb://chart.png")
        .unwrap();
    assert!(
        matches!(
            &chart.body,
            BlockBody::Image {
                width: 4,
                height: 3,
                ..
            }
        ),
        "{chart:?}"
    );
    assert!(
        reads(&turn)
            .iter()
            .all(|r| r.error.is_none() && r.outcome == ReadOutcome::Read),
        "{:?}",
        reads(&turn)
    );
}

#[tokio::test]
async fn a_read_the_consent_policy_denies_is_withheld_and_never_reaches_the_server() {
    let mcp = source();
    let stage = stage(
        Arc::clone(&mcp),
        InjectConfig {
            budget_tokens: Some(1000),
            attachments: vec![
                uri("secret", "secret://plan.md"),
                uri("kb", "kb://notes.md"),
            ],
            ..InjectConfig::default()
        },
    );
    let mut turn = turn("What is the launch code?");
    turn.consent = Some(deny(ConsentRule {
        server: Some("secret".into()),
        uri: None,
        host: Some(Decision::Deny),
        model: Some(Decision::Deny),
        tool: None,
        call: None,
    }));
    run(&stage, &mut turn).await;
    assert_eq!(
        text_of(&turn, "secret://plan.md"),
        "[resource secret://plan.md from `secret` withheld: reading it was not allowed]"
    );
    let r = read_of(&turn, "secret://plan.md");
    assert_eq!(r.outcome, ReadOutcome::Withheld);
    assert_eq!(
        r.error.as_deref(),
        Some("withheld: denied by rules[0] (server secret)")
    );
    assert_eq!(
        r.consent.as_deref(),
        Some("denied by rules[0] (server secret)")
    );
    assert_eq!((r.bytes, &r.treatment), (0, &Treatment::Omitted));
    // The other read was allowed, and only it reached a server.
    assert_eq!(
        read_of(&turn, "kb://notes.md").consent.as_deref(),
        Some("allowed by the default for host reads")
    );
    assert_eq!(mcp.reads(), [("kb".to_owned(), "kb://notes.md".to_owned())]);
    assert!(
        !turn
            .context
            .iter()
            .any(|b| b.text().is_some_and(|t| t.contains("7731")))
    );
}

#[tokio::test]
async fn a_failed_read_is_recorded_and_the_turn_goes_on() {
    let stage = stage(
        source(),
        InjectConfig {
            budget_tokens: Some(1000),
            attachments: vec![uri("kb", "kb://broken.md"), uri("kb", "kb://notes.md")],
            ..InjectConfig::default()
        },
    );
    let mut turn = turn("What does version 2 add?");
    run(&stage, &mut turn).await;
    assert_eq!(
        text_of(&turn, "kb://broken.md"),
        "[resource kb://broken.md from `kb` not included: the server reported an error]"
    );
    let r = read_of(&turn, "kb://broken.md");
    assert_eq!(r.outcome, ReadOutcome::Failed);
    assert_eq!(
        r.error.as_deref(),
        Some("MCP server `kb`: resources/read failed with JSON-RPC error -32603: disk on fire")
    );
    assert_eq!(r.treatment, Treatment::Omitted);
    assert_eq!(text_of(&turn, "kb://notes.md"), SHORT);
    assert_eq!(read_of(&turn, "kb://notes.md").error, None);
    assert_eq!(read_of(&turn, "kb://notes.md").outcome, ReadOutcome::Read);
}

#[tokio::test]
async fn a_resource_for_the_user_only_is_not_read() {
    let mcp = Arc::new(
        FakeSource::new()
            .with_text("kb", "kb://private.md", "text/markdown", "# Mine\n")
            .with_annotations(
                "kb",
                "kb://private.md",
                hostpipe_core::Annotations {
                    audience: Some(vec![hostpipe_core::Role::User]),
                    ..Default::default()
                },
            ),
    );
    let stage = stage(
        Arc::clone(&mcp),
        InjectConfig {
            budget_tokens: Some(1000),
            attachments: vec![uri("kb", "kb://private.md")],
            ..InjectConfig::default()
        },
    );
    let mut turn = turn("hello");
    run(&stage, &mut turn).await;
    let r = read_of(&turn, "kb://private.md");
    assert_eq!(r.outcome, ReadOutcome::NotRead);
    assert_eq!(
        r.error.as_deref(),
        Some("not read: its audience is the user only")
    );
    assert!(turn.context.is_empty());
    assert!(mcp.reads().is_empty());
}

#[tokio::test]
async fn an_attachment_of_the_turn_is_read_at_its_scope() {
    let stage = stage(
        source(),
        InjectConfig {
            budget_tokens: Some(1000),
            ..InjectConfig::default()
        },
    );
    let mut turn = turn("What does version 2 add?");
    turn.attachments.push(Attachment {
        server: "kb".into(),
        target: AttachmentTarget::Uri {
            uri: "kb://notes.md".into(),
        },
        scope: Scope::Message,
    });
    run(&stage, &mut turn).await;
    assert_eq!(read_of(&turn, "kb://notes.md").scope, Scope::Message);
    assert_eq!(text_of(&turn, "kb://notes.md"), SHORT);
}

#[tokio::test]
async fn an_item_under_a_denied_uri_is_withheld_on_its_own() {
    let text = |uri: &str, text: &str| ResourceContents::Text {
        uri: uri.into(),
        mime_type: Some("text/plain".into()),
        text: text.into(),
    };
    let mcp = Arc::new(FakeSource::new().with_contents(
        "kb",
        "kb://bundle",
        vec![
            text("kb://bundle", "The public part."),
            text("kb://private/salaries", "The salaries."),
        ],
    ));
    let stage = stage(
        Arc::clone(&mcp),
        InjectConfig {
            budget_tokens: Some(1000),
            attachments: vec![uri("kb", "kb://bundle")],
            ..InjectConfig::default()
        },
    );
    let mut turn = turn("What is in the bundle?");
    turn.bound_servers.truncate(1);
    turn.consent = Some(deny(ConsentRule {
        server: None,
        uri: Some("kb://private/*".into()),
        host: Some(Decision::Deny),
        model: None,
        tool: None,
        call: None,
    }));
    run(&stage, &mut turn).await;
    assert_eq!(text_of(&turn, "kb://bundle"), "The public part.");
    assert_eq!(
        text_of(&turn, "kb://private/salaries"),
        "[resource kb://private/salaries from `kb` withheld: reading it was not allowed]"
    );
    let r = read_of(&turn, "kb://private/salaries");
    assert_eq!(r.outcome, ReadOutcome::Withheld);
    assert_eq!(
        r.error.as_deref(),
        Some("withheld: denied by rules[0] (uri kb://private/*)")
    );
    assert_eq!(r.bytes, 0);
    assert_eq!(read_of(&turn, "kb://bundle").error, None);
    assert_eq!(read_of(&turn, "kb://bundle").outcome, ReadOutcome::Read);
    assert_eq!(mcp.reads().len(), 1);
}

#[tokio::test]
async fn what_the_limits_refuse_is_withheld_and_what_cannot_be_converted_failed() {
    let blob = |uri: &str, mime: &str, data: Vec<u8>| ResourceContents::Blob {
        uri: uri.into(),
        mime_type: Some(mime.into()),
        data,
    };
    // Unlisted, so that nothing is known before the read.
    let mcp = Arc::new(
        FakeSource::new()
            .with_contents(
                "kb",
                "kb://big.bin",
                vec![blob(
                    "kb://big.bin",
                    "application/octet-stream",
                    vec![0; 2048],
                )],
            )
            .with_contents(
                "kb",
                "kb://bad.png",
                vec![blob("kb://bad.png", "image/png", b"not a png".to_vec())],
            ),
    );
    let stage = stage(
        mcp,
        InjectConfig {
            budget_tokens: Some(1000),
            max_resource_bytes: 1024,
            attachments: vec![uri("kb", "kb://big.bin"), uri("kb", "kb://bad.png")],
            ..InjectConfig::default()
        },
    );
    let mut turn = turn("hello");
    run(&stage, &mut turn).await;
    let big = read_of(&turn, "kb://big.bin");
    assert_eq!(big.outcome, ReadOutcome::Withheld);
    assert_eq!(
        big.error.as_deref(),
        Some("kb://big.bin from `kb` refused: 2048 bytes is over max_resource_bytes (1024)")
    );
    assert_eq!(
        text_of(&turn, "kb://big.bin"),
        "[resource kb://big.bin from `kb` not included: too large or not allowed]"
    );
    let bad = read_of(&turn, "kb://bad.png");
    assert_eq!(bad.outcome, ReadOutcome::Failed);
    assert_eq!(
        bad.error.as_deref(),
        Some(
            "kb://bad.png from `kb` refused: not a decodable image: The image format could not be determined"
        )
    );
}

#[tokio::test]
async fn an_attachment_on_a_server_not_bound_is_not_read() {
    let mcp = source();
    let stage = stage(
        Arc::clone(&mcp),
        InjectConfig {
            budget_tokens: Some(1000),
            attachments: vec![uri("secret", "secret://plan.md")],
            ..InjectConfig::default()
        },
    );
    let mut turn = turn("hello");
    turn.bound_servers.truncate(1);
    run(&stage, &mut turn).await;
    let r = read_of(&turn, "secret://plan.md");
    assert_eq!(r.outcome, ReadOutcome::NotRead);
    assert_eq!(
        r.error.as_deref(),
        Some("server `secret` is not bound for this turn (bound: kb)")
    );
    assert_eq!(
        text_of(&turn, "secret://plan.md"),
        "[resource secret://plan.md from `secret` not included: the server is not bound for this turn]"
    );
    assert!(mcp.reads().is_empty());
}
