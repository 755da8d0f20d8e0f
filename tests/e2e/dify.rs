//! The Dify door of `hostpipe serve`: `POST /retrieval`, Dify's External Knowledge API,
//! called exactly as Dify calls an external knowledge base (its documented request:
//! `Authorization: Bearer KEY`, `knowledge_id`, `query`, `retrieval_setting` with
//! `top_k` and `score_threshold`), against pipelines whose resources live on MCP
//! servers on the official Python SDK (tests/servers/manuals_server.py,
//! tests/servers/kb_server.py). Every answer is checked against the documented
//! response schema (`records` of `content`, `score` in [0, 1], `title`, `metadata` an
//! object, never null) and the documented error shape (`error_code`, `error_msg`).

use std::path::{Path, PathBuf};

use hostpipe_tests::{ADMIN_TOKEN, READ_TOKEN, Service, root};
use reqwest::StatusCode;
use serde_json::{Value, json};

fn server(script: &str) -> String {
    root()
        .join("tests/servers")
        .join(script)
        .display()
        .to_string()
}

/// Pipeline `manuals`: the eight manuals attached; pipeline `kb`: the knowledge base's
/// four documents attached, its secrets denied by the consent policy; pipeline `bare`:
/// no injection stage.
fn write_config(dir: &Path, kb_log: &Path) -> PathBuf {
    let py = root().join("tests/.venv/bin/python").display().to_string();
    let manuals = [
        "billing",
        "travel",
        "security",
        "payroll",
        "facilities",
        "release",
        "operations",
        "组件",
    ]
    .iter()
    .map(|t| format!("{{ server = \"manuals\", uri = \"manual://{t}.md\" }}"))
    .collect::<Vec<_>>()
    .join(", ");
    let text = format!(
        r#"
[mcp_servers.manuals]
command = {py:?}
args = [{manuals_py:?}]

[mcp_servers.kb]
command = {py:?}
args = [{kb:?}]
env = {{ KB_READ_LOG = {kb_log:?} }}

[pipelines.manuals]
stages = ["bind_mcp_servers", "resource_context_injection"]
runner = "preview"

[pipelines.manuals.bind_mcp_servers]
servers = ["manuals"]

[pipelines.manuals.resource_context_injection]
budget_tokens = 2000
attachments = [{manuals}]

[pipelines.kb]
stages = ["bind_mcp_servers", "resource_context_injection"]
runner = "preview"

[pipelines.kb.bind_mcp_servers]
servers = ["kb"]

[pipelines.kb.resource_context_injection]
attachments = [
  {{ server = "kb", uri = "kb://secret/plan" }},
  {{ server = "kb", uri = "kb://secret/budget" }},
  {{ server = "kb", uri = "kb://public/handbook" }},
]

[pipelines.kb.consent]
rules = [{{ server = "kb", uri = "kb://secret/*", host = "deny", model = "deny" }}]

[pipelines.bare]
stages = []
runner = "preview"
"#,
        manuals_py = server("manuals_server.py"),
        kb = server("kb_server.py"),
        kb_log = kb_log.display().to_string(),
    );
    let path = dir.join("hostpipe.toml");
    std::fs::write(&path, text).unwrap();
    path
}

/// `POST /retrieval` as Dify sends it (its `ExternalDatasetService`: a JSON body and
/// the API key as a bearer token).
async fn retrieve(svc: &Service, key: Option<&str>, body: &Value) -> (StatusCode, Value) {
    let mut req = reqwest::Client::new()
        .post(svc.url("/retrieval"))
        .header("content-type", "application/json")
        .body(body.to_string())
        .timeout(std::time::Duration::from_secs(60));
    if let Some(k) = key {
        req = req.header("authorization", format!("Bearer {k}"));
    }
    let res = req.send().await.unwrap();
    let status = res.status();
    (status, res.json().await.unwrap_or(Value::Null))
}

/// Checks `v` against the documented response: `records`, each with a string
/// `content`, a number `score` in [0, 1], a string `title` and an object `metadata`;
/// scores never rise. Returns the records.
fn records(v: &Value) -> &Vec<Value> {
    let obj = v
        .as_object()
        .unwrap_or_else(|| panic!("not an object: {v}"));
    let records = obj["records"].as_array().unwrap_or_else(|| panic!("{v}"));
    let mut last = f64::INFINITY;
    for r in records {
        assert!(r["content"].is_string(), "{r}");
        let score = r["score"].as_f64().unwrap_or_else(|| panic!("{r}"));
        assert!((0.0..=1.0).contains(&score), "{r}");
        assert!(score <= last, "scores rise: {v}");
        last = score;
        assert!(r["title"].is_string(), "{r}");
        assert!(r["metadata"].is_object(), "metadata must be an object: {r}");
    }
    records
}

/// The documented error shape, with the code.
fn error_code(v: &Value) -> i64 {
    assert!(v["error_msg"].is_string(), "{v}");
    v["error_code"].as_i64().unwrap_or_else(|| panic!("{v}"))
}

fn body(knowledge: &str, query: &str, top_k: u64, threshold: f64) -> Value {
    json!({
        "knowledge_id": knowledge,
        "query": query,
        "retrieval_setting": {"top_k": top_k, "score_threshold": threshold},
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dify_retrieves_the_answering_passage_from_a_pipelines_resources() {
    let dir = tempfile::tempdir().unwrap();
    let kb_log = dir.path().join("kb-reads.log");
    let config = write_config(dir.path(), &kb_log);
    let store = format!("sqlite://{}", dir.path().join("h.db").display());
    let svc = Service::start(&config, &store, &[]).await;

    // The answer sits after some 80 KB of other sections of the largest manual.
    let (s, v) = retrieve(
        &svc,
        Some(READ_TOKEN),
        &body("manuals", "What is the gate code for visitors?", 3, 0.0),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let recs = records(&v);
    assert!(!recs.is_empty() && recs.len() <= 3, "{v}");
    let best = &recs[0];
    assert!(best["content"].as_str().unwrap().contains("4417"), "{v}");
    assert_eq!(best["title"], "operations.md");
    let meta = &best["metadata"];
    assert_eq!(meta["server"], "manuals");
    assert_eq!(meta["uri"], "manual://operations.md");
    assert_eq!(meta["mime_type"], "text/markdown");
    assert_eq!(meta["heading"], "Operations manual > Visitor parking");
    assert_eq!(meta["rank"], 1);
    assert!(meta["first_line"].as_u64().unwrap() > 100, "{meta}");
    // A passage is a passage, not a whole manual.
    assert!(best["content"].as_str().unwrap().len() < 4000);

    // Chinese: the section that answers is first.
    let (s, v) = retrieve(
        &svc,
        Some(ADMIN_TOKEN),
        &body("manuals", "计算属性会缓存吗？", 2, 0.0),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let recs = records(&v);
    assert!(
        recs[0]["content"]
            .as_str()
            .unwrap()
            .contains("计算属性值会基于其响应式依赖被缓存"),
        "{v}"
    );
    assert_eq!(recs[0]["metadata"]["uri"], "manual://组件.md");

    // The threshold cuts the answer at a score.
    let (_, v) = retrieve(
        &svc,
        Some(READ_TOKEN),
        &body(
            "manuals",
            "Which gate code does the visitor team use?",
            5,
            0.0,
        ),
    )
    .await;
    let scores: Vec<f64> = records(&v)
        .iter()
        .map(|r| r["score"].as_f64().unwrap())
        .collect();
    assert!(
        scores.len() >= 2 && scores[0] > *scores.last().unwrap(),
        "{scores:?}"
    );
    let cut = (scores[0] + *scores.last().unwrap()) / 2.0;
    let (_, v) = retrieve(
        &svc,
        Some(READ_TOKEN),
        &body(
            "manuals",
            "Which gate code does the visitor team use?",
            5,
            cut,
        ),
    )
    .await;
    let kept = records(&v);
    assert_eq!(
        kept.len(),
        scores.iter().filter(|s| **s >= cut).count(),
        "{v}"
    );
    // Scores keep the ranking apart: no ties at the top. At the top score, only the
    // answer is kept.
    assert!(scores[0] < 1.0 && scores[0] > scores[1], "{scores:?}");
    let (_, v) = retrieve(
        &svc,
        Some(READ_TOKEN),
        &body(
            "manuals",
            "Which gate code does the visitor team use?",
            5,
            scores[0],
        ),
    )
    .await;
    let top = records(&v);
    assert_eq!(top.len(), 1, "{v}");
    assert!(top[0]["content"].as_str().unwrap().contains("4417"), "{v}");

    // Nothing matches: an empty list, as documented.
    let (s, v) = retrieve(
        &svc,
        Some(READ_TOKEN),
        &body("manuals", "zebra xylophone", 5, 0.0),
    )
    .await;
    assert_eq!((s, v), (StatusCode::OK, json!({"records": []})));

    // metadata_condition (programmatic only in Dify): only one manual.
    let mut filtered = body("manuals", "team review report", 4, 0.0);
    filtered["metadata_condition"] = json!({
        "logical_operator": "and",
        "conditions": [{"name": ["uri"], "comparison_operator": "is", "value": "manual://travel.md"}]
    });
    let (s, v) = retrieve(&svc, Some(READ_TOKEN), &filtered).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let recs = records(&v);
    assert_eq!(recs.len(), 4, "{v}");
    assert!(
        recs.iter()
            .all(|r| r["metadata"]["uri"] == "manual://travel.md"),
        "{v}"
    );

    // The policy holds: a denied resource is never read, so it is never a record.
    let (s, v) = retrieve(
        &svc,
        Some(READ_TOKEN),
        &body(
            "kb",
            "what is the plan and the budget? support hours?",
            10,
            0.0,
        ),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let recs = records(&v);
    assert_eq!(recs.len(), 1, "{v}");
    assert_eq!(recs[0]["metadata"]["uri"], "kb://public/handbook");
    let served = std::fs::read_to_string(&kb_log).unwrap_or_default();
    assert!(
        !served.contains("secret"),
        "a denied read reached the server: {served}"
    );
    assert!(!v.to_string().contains("BLUEBIRD"));

    // A platform's key (read or turn token) cannot read past the policy through the
    // operator's look either, named pipeline or not; an admin token can.
    let look = |token: &'static str, body: Value| {
        let url = svc.url("/v1/servers/kb/resources/read");
        async move {
            let res = reqwest::Client::new()
                .post(url)
                .bearer_auth(token)
                .json(&body)
                .send()
                .await
                .unwrap();
            (res.status(), res.json::<Value>().await.unwrap())
        }
    };
    for token in [READ_TOKEN, hostpipe_tests::TURN_TOKEN] {
        for body in [
            json!({"uri": "kb://secret/plan"}),
            json!({"uri": "kb://secret/plan", "pipeline": "kb"}),
        ] {
            let (s, v) = look(token, body).await;
            assert_eq!(s, StatusCode::FORBIDDEN, "{v}");
            assert_eq!(v["error"]["code"], "read_withheld", "{v}");
            assert!(
                v["error"]["message"].as_str().unwrap().contains(
                    "pipeline `kb` does not allow reading `kb://secret/plan` from `kb` (rules[0]"
                ),
                "{v}"
            );
        }
    }
    // Nor through a prompt that embeds it.
    let prompt = |token: &'static str, document: &'static str| {
        let url = svc.url("/v1/servers/kb/prompts/briefing");
        async move {
            let res = reqwest::Client::new()
                .post(url)
                .bearer_auth(token)
                .json(&json!({"arguments": {"document": document}}))
                .send()
                .await
                .unwrap();
            (res.status(), res.json::<Value>().await.unwrap())
        }
    };
    for token in [READ_TOKEN, hostpipe_tests::TURN_TOKEN] {
        let (s, v) = prompt(token, "secret/plan").await;
        assert_eq!(s, StatusCode::FORBIDDEN, "{v}");
        assert_eq!(v["error"]["code"], "read_withheld", "{v}");
        assert!(!v.to_string().contains("BLUEBIRD"), "{v}");
        let (s, v) = prompt(token, "public/handbook").await;
        assert_eq!(s, StatusCode::OK, "{v}");
        assert_eq!(
            v["messages"][1]["content"]["resource"]["text"],
            "Support hours are 9 to 5, Monday to Friday. Refunds within 30 days."
        );
    }
    let (s, v) = prompt(ADMIN_TOKEN, "secret/plan").await;
    assert_eq!(s, StatusCode::OK, "an operator's look: {v}");
    let (s, v) = look(READ_TOKEN, json!({"uri": "kb://public/handbook"})).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let served = std::fs::read_to_string(&kb_log).unwrap_or_default();
    assert!(
        !served.contains("secret"),
        "a withheld look reached the server: {served}"
    );
    let (s, v) = look(ADMIN_TOKEN, json!({"uri": "kb://secret/plan"})).await;
    assert_eq!(s, StatusCode::OK, "an operator's look: {v}");

    // The reads are in the history, as a turn's are.
    let history: Value = reqwest::Client::new()
        .get(svc.url("/v1/history?pipeline=kb"))
        .bearer_auth(READ_TOKEN)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let text = history.to_string();
    assert!(text.contains("kb://public/handbook"), "{history}");
    assert!(
        text.contains("kb://secret/plan") && text.contains("withheld"),
        "{history}"
    );

    // Errors, in Dify's documented shape and codes.
    let q = body("manuals", "gate code", 3, 0.0);
    let (s, v) = retrieve(&svc, None, &q).await;
    assert_eq!((s, error_code(&v)), (StatusCode::UNAUTHORIZED, 1001), "{v}");
    let res = reqwest::Client::new()
        .post(svc.url("/retrieval"))
        .header("authorization", READ_TOKEN)
        .json(&q)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(error_code(&res.json().await.unwrap()), 1001);
    let (s, v) = retrieve(&svc, Some("not-a-hostpipe-token-0123456789"), &q).await;
    assert_eq!((s, error_code(&v)), (StatusCode::FORBIDDEN, 1002), "{v}");
    let (s, v) = retrieve(
        &svc,
        Some(READ_TOKEN),
        &body("nonexistent", "gate code", 3, 0.0),
    )
    .await;
    assert_eq!((s, error_code(&v)), (StatusCode::NOT_FOUND, 2001), "{v}");
    assert!(
        v["error_msg"].as_str().unwrap().contains("`nonexistent`"),
        "{v}"
    );
    let (s, v) = retrieve(
        &svc,
        Some(READ_TOKEN),
        &json!({"knowledge_id": "manuals", "query": "x"}),
    )
    .await;
    assert_eq!((s, error_code(&v)), (StatusCode::BAD_REQUEST, 400), "{v}");
    assert!(
        v["error_msg"]
            .as_str()
            .unwrap()
            .contains("retrieval_setting"),
        "{v}"
    );
    let (s, v) = retrieve(&svc, Some(READ_TOKEN), &body("manuals", "gate", 0, 0.0)).await;
    assert_eq!((s, error_code(&v)), (StatusCode::BAD_REQUEST, 400), "{v}");
    assert!(v["error_msg"].as_str().unwrap().contains("top_k"), "{v}");
    let (s, v) = retrieve(&svc, Some(READ_TOKEN), &body("manuals", "gate", 3, 1.5)).await;
    assert_eq!((s, error_code(&v)), (StatusCode::BAD_REQUEST, 400), "{v}");
    assert!(
        v["error_msg"].as_str().unwrap().contains("score_threshold"),
        "{v}"
    );
    let (s, v) = retrieve(&svc, Some(READ_TOKEN), &body("bare", "gate", 3, 0.0)).await;
    assert_eq!((s, error_code(&v)), (StatusCode::CONFLICT, 409), "{v}");
}
