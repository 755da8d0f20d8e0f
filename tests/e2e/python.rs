//! Against servers built on the official Python SDK (`mcp` 2.3.0).

use hostpipe_core::{McpSource as _, Turn};
use hostpipe_tests::{connect, python};

use crate::{block, pipeline, prepare, read_text};

#[tokio::test]
async fn tutorial_shape_resources_and_templates() {
    let host = connect(vec![python("tutorial", "tutorial_server.py")]).await;
    let resources = host.list_resources("tutorial").await.unwrap();
    assert_eq!(
        resources.iter().map(|r| r.uri.as_str()).collect::<Vec<_>>(),
        ["config://settings"]
    );
    assert_eq!(resources[0].mime_type.as_deref(), Some("application/json"));
    let templates = host.list_resource_templates("tutorial").await.unwrap();
    let mut t: Vec<_> = templates.iter().map(|t| t.uri_template.as_str()).collect();
    t.sort_unstable();
    assert_eq!(
        t,
        [
            "files://docs/{name}/meta",
            "files://raw/{+path}",
            "greeting://{name}",
            "user://{id}"
        ]
    );

    let p = pipeline(
        &host,
        r#"
[pipelines.default.bind_mcp_servers]
servers = ["tutorial"]
[pipelines.default.resource_context_injection]
attachments = [
  { server = "tutorial", uri = "config://settings" },
  { server = "tutorial", template = "greeting://{name}", arguments = { name = { var = "sender" } } },
  { server = "tutorial", template = "user://{id}", arguments = { id = "42" } },
]
"#,
    );
    let mut turn = Turn::new("default", "hello");
    turn.variables.insert("sender", "Ada");
    let (request, _) = prepare(&p, turn).await;
    let settings: serde_json::Value =
        serde_json::from_str(block(&request, "config://settings").text().unwrap()).unwrap();
    assert_eq!(settings["theme"], "dark");
    assert_eq!(
        block(&request, "greeting://Ada").text(),
        Some("Hello, Ada!")
    );
    let user: serde_json::Value =
        serde_json::from_str(block(&request, "user://42").text().unwrap()).unwrap();
    assert_eq!(user["id"], "42");
    host.shutdown().await;
}

#[tokio::test]
async fn template_arguments_are_percent_encoded() {
    let host = connect(vec![python("tutorial", "tutorial_server.py")]).await;
    let p = pipeline(
        &host,
        r#"
[pipelines.default.bind_mcp_servers]
servers = ["tutorial"]
[pipelines.default.resource_context_injection]
attachments = [{ server = "tutorial", template = "greeting://{name}", arguments = { name = { var = "who" } } }]
"#,
    );
    let mut turn = Turn::new("default", "hello");
    turn.variables.insert("who", "a b/ç");
    let (request, trace) = prepare(&p, turn).await;
    let uri = "greeting://a%20b%2F%C3%A7";
    assert_eq!(
        trace.reads().map(|r| r.uri.as_str()).collect::<Vec<_>>(),
        [uri]
    );
    let b = block(&request, uri);
    assert_eq!(
        b.text(),
        Some(read_text(&host, "tutorial", uri).await.as_str())
    );
    assert_eq!(
        b.source
            .template
            .as_ref()
            .map(|t| t.arguments["name"].as_str()),
        Some("a b/ç")
    );
    host.shutdown().await;
}

#[tokio::test]
async fn template_values_stay_in_their_segment_and_reach_the_server_exactly() {
    let host = connect(vec![python("tutorial", "tutorial_server.py")]).await;
    let p = pipeline(
        &host,
        r#"
[pipelines.default.bind_mcp_servers]
servers = ["tutorial"]
[pipelines.default.resource_context_injection]
attachments = [
  { server = "tutorial", template = "files://docs/{name}/meta", arguments = { name = { var = "name" } } },
  { server = "tutorial", template = "files://raw/{+path}", arguments = { path = { var = "name" } } },
]
"#,
    );
    // {simple}: every reserved character is encoded, so `/` and `..` stay inside the
    // segment; {+reserved}: `/` is kept, as the template asks, but a space or `ç` is not.
    let cases = [
        (
            "../etc/passwd",
            "files://docs/..%2Fetc%2Fpasswd/meta",
            "files://raw/../etc/passwd",
        ),
        ("a b", "files://docs/a%20b/meta", "files://raw/a%20b"),
        ("ç", "files://docs/%C3%A7/meta", "files://raw/%C3%A7"),
        ("x/y", "files://docs/x%2Fy/meta", "files://raw/x/y"),
    ];
    for (value, simple, reserved) in cases {
        let mut turn = Turn::new("default", "hello");
        turn.variables.insert("name", value);
        let (request, trace) = prepare(&p, turn).await;
        let uris: Vec<&str> = trace.reads().map(|r| r.uri.as_str()).collect();
        assert!(
            uris.contains(&simple) && uris.contains(&reserved),
            "{value}: {uris:?}"
        );
        let got: serde_json::Value =
            serde_json::from_str(block(&request, simple).text().unwrap()).unwrap();
        assert_eq!(got["name"], value, "{simple}");
        let got: serde_json::Value =
            serde_json::from_str(block(&request, reserved).text().unwrap()).unwrap();
        assert_eq!(got["path"], value, "{reserved}");
    }
    host.shutdown().await;
}

#[tokio::test]
async fn follows_next_cursor_through_every_page() {
    let host = connect(vec![python("paged", "paged_server.py")]).await;
    let resources = host.list_resources("paged").await.unwrap();
    let uris: Vec<_> = resources.iter().map(|r| r.uri.as_str()).collect();
    assert_eq!(
        uris,
        [
            "paged://item/0",
            "paged://item/1",
            "paged://item/2",
            "paged://item/3",
            "paged://item/4"
        ]
    );
    // 5 items at 2 per page is 3 pages.
    assert_eq!(
        host.request_counts("paged").unwrap().get("resources/list"),
        Some(&3)
    );
    assert!(host.server("paged").unwrap().warnings.is_empty());
    host.shutdown().await;
}

/// The paged server's resources under `options`: how many were kept, and the server's
/// warnings.
async fn paged_with(options: hostpipe_mcp::HostOptions) -> (usize, Vec<String>) {
    let host = hostpipe_mcp::McpHost::new(vec![python("paged", "paged_server.py")], options);
    host.connect_all().await;
    let kept = host.list_resources("paged").await.unwrap().len();
    let warnings = host.server("paged").unwrap().warnings;
    host.shutdown().await;
    (kept, warnings)
}

#[tokio::test]
async fn a_page_cap_cuts_the_list_with_a_warning() {
    let (kept, warnings) = paged_with(hostpipe_mcp::HostOptions {
        max_list_pages: 2,
        ..hostpipe_mcp::HostOptions::default()
    })
    .await;
    assert_eq!(kept, 4);
    assert_eq!(
        warnings,
        ["resources/list: more than 2 pages; the list was cut at 4 items"]
    );
}

#[tokio::test]
async fn an_item_cap_cuts_the_list_with_a_warning() {
    let (kept, warnings) = paged_with(hostpipe_mcp::HostOptions {
        max_list_items: 3,
        ..hostpipe_mcp::HostOptions::default()
    })
    .await;
    assert_eq!(kept, 3);
    assert_eq!(
        warnings,
        ["resources/list: more than 3 items (max_list_items); the list was cut at 3"]
    );
}
