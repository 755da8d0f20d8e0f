//! Against `@modelcontextprotocol/server-filesystem`: tools only, no `resources`.

use hostpipe_core::{McpSource as _, ToolOrigin, Turn};
use hostpipe_tests::{connect, filesystem};

use crate::{pipeline, prepare};

#[tokio::test]
async fn a_server_without_resources_gets_no_resource_requests_and_no_exploration_tools() {
    let dir = std::env::temp_dir();
    let host = connect(vec![filesystem("fs", &dir)]).await;
    let info = host.server("fs").unwrap();
    assert!(info.status.is_connected(), "{:?}", info.status);
    assert!(info.capabilities.tools && !info.capabilities.resources);
    let tools = host.list_tools("fs").await.unwrap();
    assert!(
        tools.iter().any(|t| t.name == "read_text_file"),
        "{:?}",
        tools.iter().map(|t| &t.name).collect::<Vec<_>>()
    );

    let p = pipeline(
        &host,
        r#"
[pipelines.default.bind_mcp_servers]
servers = ["fs"]
"#,
    );
    let (request, _) = prepare(&p, Turn::new("default", "list my files")).await;
    assert!(
        request
            .tools
            .iter()
            .all(|t| matches!(t.origin, ToolOrigin::Mcp { .. }))
    );
    assert!(request.tools.iter().any(|t| t.name == "fs__read_text_file"));
    assert_eq!(request.tools.len(), tools.len());
    assert!(request.tools.iter().all(|t| t.name.len() <= 64));

    let counts = host.request_counts("fs").unwrap();
    assert!(
        counts.keys().all(|m| !m.starts_with("resources/")),
        "{counts:?}"
    );
    assert_eq!(counts.get("tools/list"), Some(&1));
    host.shutdown().await;
}
