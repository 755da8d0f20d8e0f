//! Issue 3: the budget, its strategies and non-text content, against a low-level
//! Python SDK server with awkward contents (tests/servers/content_server.py).

use hostpipe_core::{BlockBody, FallbackReason, McpSource as _, Treatment, Turn};
use hostpipe_tests::{connect, python};

use crate::{block, pipeline, prepare};

fn config(model: &str, budget: usize, uris: &[&str]) -> String {
    let attachments: Vec<String> = uris
        .iter()
        .map(|u| format!("{{ server = \"content\", uri = \"{u}\" }}"))
        .collect();
    format!(
        "{model}\n[pipelines.default.bind_mcp_servers]\nservers = [\"content\"]\n\
         [pipelines.default.resource_context_injection]\nbudget_tokens = {budget}\nattachments = [{}]\n",
        attachments.join(", ")
    )
}

#[tokio::test]
async fn images_go_to_vision_models_and_become_notes_for_the_others_and_bombs_are_refused() {
    let host = connect(vec![python("content", "content_server.py")]).await;
    let uris = ["img://large.png", "img://bomb.png", "doc://p1"];

    let vision = pipeline(
        &host,
        &config(
            "[model]\nvision = true\nmax_image_edge_px = 2048",
            4000,
            &uris,
        ),
    );
    let (request, trace) = prepare(&vision, Turn::new("default", "describe the photo")).await;
    let image = block(&request, "img://large.png");
    let BlockBody::Image {
        width,
        height,
        mime_type,
        data,
    } = &image.body
    else {
        panic!("an image part, got {:?}", image.body)
    };
    assert_eq!(
        (*width, *height, mime_type.as_str()),
        (2048, 1536, "image/png")
    );
    assert!(!data.is_empty() && data.len() <= 20 * 1024 * 1024);
    // 2048×1536 → 1536×1152 → 3×3 tiles of 512: 85 + 170 × 6 with OpenAI's rule.
    assert_eq!(
        image.tokens_after,
        hostpipe_stages::convert::image_tokens(2048, 1536)
    );
    let bomb = trace.reads().find(|r| r.uri == "img://bomb.png").unwrap();
    assert!(
        bomb.error
            .as_deref()
            .unwrap()
            .contains("decompression bomb"),
        "{bomb:?}"
    );
    assert!(
        block(&request, "doc://p1")
            .text()
            .unwrap()
            .starts_with("# Must"),
        "the turn went on"
    );

    let text_only = pipeline(&host, &config("[model]\nvision = false", 4000, &uris));
    let (request, _) = prepare(&text_only, Turn::new("default", "describe the photo")).await;
    let note = block(&request, "img://large.png");
    let BlockBody::Fallback { reason, note } = &note.body else {
        panic!("a note, got {:?}", note.body)
    };
    assert_eq!(*reason, FallbackReason::ImageWithoutVision);
    assert!(
        note.starts_with("[image resource img://large.png not shown, the model has no vision (large, image/png, 4000×3000 px, ")
            && note.ends_with(" bytes; A wide photo)]"),
        "{note}"
    );
    host.shutdown().await;
}

#[tokio::test]
async fn a_500_token_budget_keeps_the_must_resource_and_never_sends_user_only_ones() {
    let host = connect(vec![python("content", "content_server.py")]).await;
    let p = pipeline(
        &host,
        &config(
            "",
            500,
            &["doc://p01", "doc://private", "doc://p05", "doc://p1"],
        ),
    );
    let (request, trace) = prepare(&p, Turn::new("default", "what are the facts")).await;
    assert_eq!(block(&request, "doc://p1").treatment, Treatment::Whole);
    // Ranked by priority: 1.0, 0.5, 0.1.
    let order: Vec<_> = request
        .context
        .iter()
        .map(|b| b.source.uri.as_str())
        .collect();
    assert_eq!(order.first(), Some(&"doc://p1"));
    if let [_, second, ..] = order.as_slice() {
        assert_eq!(*second, "doc://p05");
    }
    for b in &request.context {
        assert_ne!(b.source.uri, "doc://private");
        if b.source.uri != "doc://p1" {
            assert_ne!(
                b.treatment,
                Treatment::Whole,
                "{} should have shrunk",
                b.source.uri
            );
        }
    }
    assert!(
        request.context_tokens() <= 500,
        "{}",
        request.context_tokens()
    );
    let private = trace.reads().find(|r| r.uri == "doc://private").unwrap();
    assert_eq!(
        private.error.as_deref(),
        Some("not read: its audience is the user only")
    );
    assert_eq!(
        host.request_counts("content")
            .unwrap()
            .get("resources/read"),
        Some(&3),
        "the private one is never read"
    );
    host.shutdown().await;
}

#[tokio::test]
async fn chunk_selection_finds_the_answer_in_the_middle_of_2_mb() {
    let host = connect(vec![python("content", "content_server.py")]).await;
    let p = pipeline(&host, &config("", 1500, &["big://handbook.md"]));
    let (request, trace) = prepare(
        &p,
        Turn::new(
            "default",
            "Where do visitors park, and what is the gate code?",
        ),
    )
    .await;
    let b = block(&request, "big://handbook.md");
    let Treatment::Chunked { kept, total } = b.treatment else {
        panic!("chunked, got {:?}", b.treatment)
    };
    assert!(kept >= 1 && total > 500, "{kept} of {total}");
    let text = b.text().unwrap();
    assert!(text.contains("gate code 4417"), "{text}");
    assert!(text.starts_with("[lines "), "locators: {text}");
    assert!(b.tokens_after <= 1500);
    let read = trace.reads().next().unwrap();
    assert!(read.bytes > 2_000_000 && read.tokens_estimated);
    host.shutdown().await;
}

#[tokio::test]
async fn blobs_by_mime_type_and_invalid_base64_is_an_error_block() {
    let host = connect(vec![python("content", "content_server.py")]).await;
    let p = pipeline(
        &host,
        &config(
            "",
            4000,
            &[
                "blob://notes",
                "blob://random",
                "blob://report.pdf",
                "blob://broken",
            ],
        ),
    );
    let (request, trace) = prepare(&p, Turn::new("default", "notes?")).await;
    assert_eq!(
        block(&request, "blob://notes").text(),
        Some("Meeting notes: ship on Tuesday, café at 10.")
    );
    assert_eq!(
        block(&request, "blob://random").text(),
        Some(
            "[binary resource blob://random not shown: its bytes are not UTF-8 text (random, application/octet-stream, 512 bytes)]"
        )
    );
    assert_eq!(
        block(&request, "blob://report.pdf").text(),
        Some(
            "[binary resource blob://report.pdf not shown: application/pdf is not text (report, application/pdf, 51 bytes; Quarterly report)]"
        )
    );
    assert_eq!(
        block(&request, "blob://broken").text(),
        Some(
            "[resource blob://broken from `content` not included: the server sent an invalid response]"
        )
    );
    let broken = trace.reads().find(|r| r.uri == "blob://broken").unwrap();
    assert!(
        broken
            .error
            .as_deref()
            .unwrap()
            .contains("not valid base64"),
        "{broken:?}"
    );
    for b in &request.context {
        assert!(
            !b.text().unwrap_or("").contains("JVBERi0"),
            "no base64 of the PDF anywhere"
        );
    }
    assert!(host.server("content").unwrap().status.is_connected());
    host.shutdown().await;
}

#[tokio::test]
async fn a_small_budget_still_finds_the_section_that_answers() {
    let host = hostpipe_tests::connect(vec![hostpipe_tests::demo("demo")]).await;
    for budget in [120, 200, 400] {
        let toml = format!(
            r#"
[pipelines.default]
stages = ["bind_mcp_servers", "resource_context_injection"]
[pipelines.default.bind_mcp_servers]
servers = ["demo"]
[pipelines.default.resource_context_injection]
budget_tokens = {budget}
attachments = [{{ server = "demo", uri = "demo://docs/handbook.md" }}]
"#
        );
        let p = crate::pipeline(&host, &toml);
        let (request, _) = crate::prepare(
            &p,
            hostpipe_core::Turn::new("default", "How large a refund can a team member grant?"),
        )
        .await;
        let text = request.context[0].text().unwrap_or_default();
        assert!(
            text.contains("## Refunds\n\nRefunds up to 100 EUR"),
            "budget {budget}: {text}"
        );
        // No chunk is a bare heading.
        for part in text.split("[lines ").skip(1) {
            let body: Vec<&str> = part
                .lines()
                .skip(1)
                .filter(|l| !l.trim().is_empty())
                .collect();
            assert!(
                !(body.len() == 1 && body[0].starts_with('#')),
                "budget {budget}: a bare heading: {part}"
            );
        }
        assert!(request.context_tokens() <= budget);
    }
    host.shutdown().await;
}
