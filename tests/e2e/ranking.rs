//! Passage ranking across resources against a real MCP server (the official Python SDK's
//! MCPServer, `tests/servers/manuals_server.py`: eight long markdown manuals), and the
//! optional dense retrieval and reranking services against a local HTTP server that
//! checks every request against the published API shapes (OpenAI API reference,
//! "Embeddings / Create embeddings"; Cohere API reference, "Rerank v2").

use std::sync::{Arc, Mutex};
use std::time::Duration;

use hostpipe_core::{Treatment, Turn};
use hostpipe_mcp::McpHost;
use hostpipe_tests::{connect, python};
use serde_json::{Value, json};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

use crate::{block, pipeline, prepare};

const MANUALS: [&str; 8] = [
    "manual://billing.md",
    "manual://travel.md",
    "manual://security.md",
    "manual://payroll.md",
    "manual://facilities.md",
    "manual://release.md",
    "manual://operations.md",
    "manual://组件.md",
];

fn config(budget: usize, extra: &str, services: &str) -> String {
    let attachments: Vec<String> = MANUALS
        .iter()
        .map(|u| format!("{{ server = \"manuals\", uri = \"{u}\" }}"))
        .collect();
    format!(
        r#"
{services}
[pipelines.default.bind_mcp_servers]
servers = ["manuals"]
[pipelines.default.resource_context_injection]
budget_tokens = {budget}
{extra}
attachments = [{}]
"#,
        attachments.join(", ")
    )
}

async fn manuals() -> Arc<McpHost> {
    connect(vec![python("manuals", "manuals_server.py")]).await
}

#[tokio::test]
async fn the_answer_at_the_end_of_the_largest_of_eight_manuals_is_kept_at_300_tokens() {
    let host = manuals().await;
    let p = pipeline(&host, &config(300, "", ""));
    let (request, trace) = prepare(
        &p,
        Turn::new("default", "What is the gate code for visitors?"),
    )
    .await;
    let b = block(&request, "manual://operations.md");
    let text = b.text().unwrap();
    assert!(text.contains("gate code 4417"), "{text}");
    assert!(
        text.starts_with("[lines ") && text.contains(" · Operations manual > Visitor parking]"),
        "locator and heading path: {text}"
    );
    assert!(matches!(b.treatment, Treatment::Chunked { .. }));
    assert!(request.context_tokens() <= 300);
    // The trace: the kept passage's rank and score, and why each other manual is out.
    let read = trace
        .reads()
        .find(|r| r.uri == "manual://operations.md")
        .unwrap();
    let kept = read
        .passages
        .iter()
        .find(|p| p.heading.ends_with("Visitor parking"))
        .unwrap();
    assert_eq!(kept.rank, 1, "{:?}", read.passages);
    assert!(kept.score > 0.0);
    let left_out: Vec<_> = trace.reads().filter(|r| r.tokens_after == 0).collect();
    assert!(!left_out.is_empty());
    for r in &left_out {
        let reason = r.reason.as_deref().unwrap_or_default();
        assert!(
            reason == "no passage matched the message"
                || reason.contains("the budget ran out at rank"),
            "{}: {reason}",
            r.uri
        );
    }
    // The note's numbers add up: kept + left out = the eight manuals.
    let note = trace
        .records()
        .iter()
        .find_map(|r| match &r.event {
            hostpipe_core::TraceEvent::Note { message } if message.starts_with("ranked ") => {
                Some(message.clone())
            }
            _ => None,
        })
        .unwrap();
    let kept_resources = 8 - left_out.len();
    let unmatched = left_out
        .iter()
        .filter(|r| r.reason.as_deref() == Some("no passage matched the message"))
        .count();
    assert!(
        note.contains(&format!("from {kept_resources} resource"))
            && note.ends_with(&format!(
                "; {} left out: {unmatched} with no passage matching the message, {} ranked below the cut",
                left_out.len(),
                left_out.len() - unmatched
            )),
        "{note}"
    );
    host.shutdown().await;
}

#[tokio::test]
async fn a_chinese_question_finds_its_chinese_passage() {
    let host = manuals().await;
    let p = pipeline(&host, &config(200, "", ""));
    let (request, _) = prepare(&p, Turn::new("default", "计算属性会缓存吗？")).await;
    let text = block(&request, "manual://组件.md").text().unwrap();
    assert!(
        text.contains("仅会在其响应式依赖更新时才重新计算"),
        "{text}"
    );
    assert!(text.contains(" · 组件手册 > 计算属性缓存]"), "{text}");
    assert!(request.context_tokens() <= 200);
    host.shutdown().await;
}

#[tokio::test]
async fn a_larger_budget_keeps_what_a_smaller_one_kept() {
    let host = manuals().await;
    let question = "Which policy exceptions need an escalation to the owner?";
    let mut previous: Vec<(String, Vec<(u32, u32)>)> = Vec::new();
    for budget in [250, 500, 1000, 2000] {
        let p = pipeline(&host, &config(budget, "", ""));
        let (request, trace) = prepare(&p, Turn::new("default", question)).await;
        assert!(request.context_tokens() <= budget);
        let now: Vec<(String, Vec<(u32, u32)>)> = trace
            .reads()
            .map(|r| {
                (
                    r.uri.clone(),
                    r.passages
                        .iter()
                        .map(|p| (p.first_line, p.last_line))
                        .collect(),
                )
            })
            .collect();
        for (uri, spans) in &previous {
            let (_, bigger) = now.iter().find(|(u, _)| u == uri).unwrap();
            for (a, b) in spans {
                assert!(
                    bigger.iter().any(|(x, y)| x <= a && b <= y),
                    "{uri}: lines {a}-{b} kept below {budget} tokens are lost at {budget}"
                );
            }
        }
        assert!(now.iter().map(|(_, s)| s.len()).sum::<usize>() >= 1);
        previous = now;
    }
    host.shutdown().await;
}

/// The concepts of the toy embedding and rerank models: words of one meaning share a
/// dimension, so "retract … uploaded … by accident" is close to "yanked … pushed … by
/// mistake" although no word is shared.
const CONCEPTS: [&[&str]; 3] = [
    &["retract", "yanked", "yank", "undo", "back"],
    &["uploaded", "upload", "pushed", "published", "publish"],
    &["accident", "mistake", "error"],
];

fn toy_vector(text: &str) -> Vec<f32> {
    let mut v = vec![0.0f32; CONCEPTS.len() + 1];
    for word in text
        .split(|c: char| !c.is_alphanumeric())
        .map(str::to_lowercase)
    {
        match CONCEPTS.iter().position(|c| c.contains(&word.as_str())) {
            Some(i) => v[i] += 1.0,
            None => v[CONCEPTS.len()] += 0.05,
        }
    }
    v
}

/// A request checker: every request's problems, in order.
#[derive(Clone, Default)]
struct Checked {
    problems: Arc<Mutex<Vec<String>>>,
    bodies: Arc<Mutex<Vec<Value>>>,
}

impl Checked {
    fn problem(&self, p: String) -> ResponseTemplate {
        self.problems.lock().unwrap().push(p.clone());
        ResponseTemplate::new(400).set_body_json(json!({"error": {"message": p}}))
    }

    fn assert_clean(&self) {
        assert_eq!(*self.problems.lock().unwrap(), Vec::<String>::new());
    }
}

/// `POST /v1/embeddings` as the OpenAI API reference defines it: a JSON body with
/// `model` (string), `input` (an array of 1..=2048 non-empty strings) and
/// `encoding_format` ("float" or "base64"), nothing else we do not know; the bearer key.
/// Answers the embeddings in reverse order, as the API allows (each has its `index`).
struct Embeddings(Checked);

impl Respond for Embeddings {
    fn respond(&self, req: &Request) -> ResponseTemplate {
        if req
            .headers
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            != Some("Bearer emb-key")
        {
            return self.0.problem("missing or wrong bearer key".into());
        }
        if req
            .headers
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            != Some("application/json")
        {
            return self
                .0
                .problem("content-type is not application/json".into());
        }
        let Ok(body) = serde_json::from_slice::<Value>(&req.body) else {
            return self.0.problem("the body is not JSON".into());
        };
        self.0.bodies.lock().unwrap().push(body.clone());
        let known = ["model", "input", "encoding_format", "dimensions", "user"];
        if let Some(k) = body
            .as_object()
            .and_then(|o| o.keys().find(|k| !known.contains(&k.as_str())))
        {
            return self.0.problem(format!("unknown field `{k}`"));
        }
        if !body["model"].is_string() {
            return self.0.problem("`model` is not a string".into());
        }
        if !matches!(
            body["encoding_format"].as_str(),
            Some("float" | "base64") | None
        ) {
            return self
                .0
                .problem("`encoding_format` is not float or base64".into());
        }
        let Some(input) = body["input"].as_array() else {
            return self.0.problem("`input` is not an array".into());
        };
        if input.is_empty() || input.len() > 2048 {
            return self.0.problem(format!("`input` has {} items", input.len()));
        }
        let mut data = Vec::new();
        for (i, x) in input.iter().enumerate() {
            match x.as_str() {
                Some(s) if !s.is_empty() => data.push(json!({
                    "object": "embedding", "index": i, "embedding": toy_vector(s)
                })),
                _ => {
                    return self
                        .0
                        .problem(format!("`input[{i}]` is not a non-empty string"));
                }
            }
        }
        data.reverse();
        ResponseTemplate::new(200).set_body_json(json!({
            "object": "list", "data": data, "model": body["model"],
            "usage": {"prompt_tokens": 1, "total_tokens": 1}
        }))
    }
}

/// `POST /v1/rerank` as Cohere's API reference (Rerank v2) defines it: `model`
/// (string), `query` (string), `documents` (an array of strings), optional `top_n` (an
/// integer, at most the documents). Answers `results` by falling relevance; the toy
/// relevance is the concepts a document shares with the query.
struct Rerank(Checked);

impl Respond for Rerank {
    fn respond(&self, req: &Request) -> ResponseTemplate {
        let Ok(body) = serde_json::from_slice::<Value>(&req.body) else {
            return self.0.problem("the body is not JSON".into());
        };
        self.0.bodies.lock().unwrap().push(body.clone());
        let known = [
            "model",
            "query",
            "documents",
            "top_n",
            "max_tokens_per_doc",
            "return_documents",
        ];
        if let Some(k) = body
            .as_object()
            .and_then(|o| o.keys().find(|k| !known.contains(&k.as_str())))
        {
            return self.0.problem(format!("unknown field `{k}`"));
        }
        let (Some(_), Some(query), Some(docs)) = (
            body["model"].as_str(),
            body["query"].as_str(),
            body["documents"].as_array(),
        ) else {
            return self
                .0
                .problem("`model`, `query` or `documents` missing or mistyped".into());
        };
        if docs.iter().any(|d| !d.is_string()) {
            return self.0.problem("a document is not a string".into());
        }
        if let Some(n) = body.get("top_n")
            && !n
                .as_u64()
                .is_some_and(|n| n >= 1 && n as usize <= docs.len())
        {
            return self
                .0
                .problem(format!("`top_n` {n} is not in 1..={}", docs.len()));
        }
        let q = toy_vector(query);
        let mut results: Vec<(usize, f64)> = docs
            .iter()
            .enumerate()
            .map(|(i, d)| {
                let v = toy_vector(d.as_str().unwrap_or_default());
                let shared = (0..CONCEPTS.len())
                    .filter(|&c| q[c] > 0.0 && v[c] > 0.0)
                    .count();
                (i, shared as f64)
            })
            .collect();
        results.sort_by(|a, b| b.1.total_cmp(&a.1));
        ResponseTemplate::new(200).set_body_json(json!({
            "id": "r-1",
            "results": results.iter().map(|(i, s)| json!({"index": i, "relevance_score": s})).collect::<Vec<_>>(),
            "meta": {"billed_units": {"search_units": 1}}
        }))
    }
}

fn services(base: &str, timeout_ms: u64) -> String {
    format!(
        r#"
[embedders.toy]
base_url = "{base}/v1"
model = "toy-embed"
headers = {{ Authorization = "Bearer emb-key" }}
timeout_ms = {timeout_ms}
batch_size = 100

[rerankers.toy]
base_url = "{base}/v1"
model = "toy-rerank"
timeout_ms = {timeout_ms}
"#
    )
}

const RETRACT: &str = "How can I retract a crate I uploaded by accident?";

#[tokio::test]
async fn dense_retrieval_finds_a_passage_that_shares_no_word_with_the_message() {
    let api = MockServer::start().await;
    let checked = Checked::default();
    Mock::given(method("POST"))
        .and(path("/v1/embeddings"))
        .respond_with(Embeddings(checked.clone()))
        .mount(&api)
        .await;
    let host = manuals().await;
    // Lexically, no passage of the release manual matches: the answer is left out.
    let lexical = pipeline(&host, &config(300, "", ""));
    let (request, _) = prepare(&lexical, Turn::new("default", RETRACT)).await;
    assert!(
        !request
            .context
            .iter()
            .any(|b| b.text().unwrap_or("").contains("can be yanked")),
        "found without embeddings"
    );
    let dense = pipeline(
        &host,
        &config(300, "embedder = \"toy\"", &services(&api.uri(), 10_000)),
    );
    let (request, trace) = prepare(&dense, Turn::new("default", RETRACT)).await;
    let text = block(&request, "manual://release.md").text().unwrap();
    assert!(text.contains("can be yanked"), "{text}");
    assert!(request.context_tokens() <= 300);
    assert!(
        trace.records().iter().any(
            |r| matches!(&r.event, hostpipe_core::TraceEvent::Note { message }
            if message.contains("fused with dense retrieval by `toy`"))
        ),
        "the trace says how it was ranked"
    );
    checked.assert_clean();
    let first = checked.bodies.lock().unwrap().len();
    assert!(first >= 1);
    // A second turn embeds only its message: passages are cached by content hash.
    let (_, _) = prepare(
        &dense,
        Turn::new("default", "Can a pushed version be taken back?"),
    )
    .await;
    let bodies = checked.bodies.lock().unwrap().clone();
    assert_eq!(bodies.len(), first + 1, "one more request");
    assert_eq!(bodies[first]["input"].as_array().map(Vec::len), Some(1));
    assert_eq!(
        bodies[first]["input"][0],
        "Can a pushed version be taken back?"
    );
    checked.assert_clean();
    host.shutdown().await;
}

#[tokio::test]
async fn a_reranker_reorders_the_first_passages() {
    let api = MockServer::start().await;
    let checked = Checked::default();
    Mock::given(method("POST"))
        .and(path("/v1/rerank"))
        .respond_with(Rerank(checked.clone()))
        .mount(&api)
        .await;
    let host = manuals().await;
    // Lexically, every passage of the release manual matches only through its title,
    // "Release manual", so "Taking a version back", its last section, comes last of
    // them; the reranker puts it first.
    let question = "What do I do about a release I published in error?";
    let lexical = pipeline(&host, &config(150, "", ""));
    let (request, _) = prepare(&lexical, Turn::new("default", question)).await;
    assert!(
        !request
            .context
            .iter()
            .any(|b| b.text().unwrap_or("").contains("can be yanked")),
        "found without the reranker"
    );
    let p = pipeline(
        &host,
        &config(
            150,
            "reranker = \"toy\"\nrerank_top = 200",
            &services(&api.uri(), 10_000),
        ),
    );
    let (request, trace) = prepare(&p, Turn::new("default", question)).await;
    let text = block(&request, "manual://release.md").text().unwrap();
    assert!(text.contains("can be yanked"), "{text}");
    let body = checked.bodies.lock().unwrap()[0].clone();
    assert_eq!(body["model"], "toy-rerank");
    assert_eq!(body["query"], question);
    let docs = body["documents"].as_array().unwrap();
    assert!(!docs.is_empty() && docs.len() <= 200);
    assert!(trace.records().iter().any(
        |r| matches!(&r.event, hostpipe_core::TraceEvent::Note { message }
            if message.contains("reranked by `toy`"))
    ),);
    checked.assert_clean();
    host.shutdown().await;
}

#[tokio::test]
async fn a_failing_or_slow_service_leaves_the_lexical_ranking_and_says_why() {
    let api = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/embeddings"))
        .respond_with(ResponseTemplate::new(500).set_body_string("model not loaded"))
        .mount(&api)
        .await;
    Mock::given(method("POST"))
        .and(path("/v1/rerank"))
        .respond_with(
            ResponseTemplate::new(200)
                .set_delay(Duration::from_secs(3))
                .set_body_json(json!({"results": []})),
        )
        .mount(&api)
        .await;
    let host = manuals().await;
    let lexical = pipeline(&host, &config(300, "", ""));
    let question = "What is the gate code for visitors?";
    let (plain, _) = prepare(&lexical, Turn::new("default", question)).await;
    let p = pipeline(
        &host,
        &config(
            300,
            "embedder = \"toy\"\nreranker = \"toy\"",
            &services(&api.uri(), 300),
        ),
    );
    let (request, trace) = prepare(&p, Turn::new("default", question)).await;
    // The turn goes on with the lexical order: the same context.
    let texts = |r: &hostpipe_core::RunRequest| -> Vec<String> {
        r.context
            .iter()
            .map(|b| b.text().unwrap_or("").to_owned())
            .collect()
    };
    assert_eq!(texts(&request), texts(&plain));
    let warnings = trace.warnings().collect::<Vec<_>>().join("\n");
    assert!(
        warnings.contains(
            "dense retrieval failed, the lexical ranking was used: embedder `toy` failed: POST "
        ) && warnings.contains("/v1/embeddings: HTTP 500 Internal Server Error: model not loaded"),
        "{warnings}"
    );
    assert!(
        warnings.contains(
            "reranking failed, the order before it was used: reranker `toy` failed: POST "
        ) && warnings.contains("/v1/rerank: no answer within 300 ms"),
        "{warnings}"
    );
    // A service that just failed is not asked again on the next turn: a service that is
    // down costs one turn its timeout, not every turn.
    let asked = api.received_requests().await.unwrap().len();
    let (again, trace) = prepare(&p, Turn::new("default", question)).await;
    assert_eq!(texts(&again), texts(&plain));
    assert_eq!(api.received_requests().await.unwrap().len(), asked);
    let warnings = trace.warnings().collect::<Vec<_>>().join("\n");
    assert!(
        warnings
            .contains("embedder `toy` was not asked: it failed 0 s ago (asked again after 30 s)")
            && warnings.contains("reranker `toy` was not asked"),
        "{warnings}"
    );
    host.shutdown().await;
}

#[tokio::test]
async fn vectors_of_zeros_are_ignored_with_a_warning() {
    let api = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/embeddings"))
        .respond_with(|req: &Request| {
            let body: Value = serde_json::from_slice(&req.body).unwrap();
            let n = body["input"].as_array().unwrap().len();
            let data: Vec<Value> = (0..n)
                .map(|i| json!({"index": i, "embedding": [0.0, 0.0, 0.0]}))
                .collect();
            ResponseTemplate::new(200).set_body_json(json!({"data": data}))
        })
        .mount(&api)
        .await;
    let host = manuals().await;
    let question = "What is the gate code for visitors?";
    let (plain, _) = prepare(
        &pipeline(&host, &config(300, "", "")),
        Turn::new("default", question),
    )
    .await;
    let p = pipeline(
        &host,
        &config(300, "embedder = \"toy\"", &services(&api.uri(), 10_000)),
    );
    let (request, trace) = prepare(&p, Turn::new("default", question)).await;
    let texts = |r: &hostpipe_core::RunRequest| -> Vec<String> {
        r.context
            .iter()
            .map(|b| b.text().unwrap_or("").to_owned())
            .collect()
    };
    assert_eq!(texts(&request), texts(&plain));
    let warnings = trace.warnings().collect::<Vec<_>>().join("\n");
    assert!(
        warnings.contains("embedder `toy` gave vectors with no direction (all zeros): the lexical ranking was used"),
        "{warnings}"
    );
    host.shutdown().await;
}

#[tokio::test]
async fn the_clients_check_what_the_services_answer() {
    use hostpipe_core::{Embedder as _, Reranker as _};
    use hostpipe_runners::{HttpReranker, OpenAiEmbedder, RerankApi, RetrievalServiceConfig};
    let api = MockServer::start().await;
    // An index out of range is an error, not a silent mix-up.
    Mock::given(method("POST"))
        .and(path("/v1/embeddings"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({
            "data": [{"index": 0, "embedding": [1.0]}, {"index": 5, "embedding": [1.0]}]
        })))
        .mount(&api)
        .await;
    // TEI's own rerank shape: `texts` in, a bare array out.
    let tei = Checked::default();
    let seen = tei.clone();
    Mock::given(method("POST"))
        .and(path("/tei/rerank"))
        .respond_with(move |req: &Request| {
            let body: Value = serde_json::from_slice(&req.body).unwrap();
            seen.bodies.lock().unwrap().push(body);
            ResponseTemplate::new(200).set_body_json(json!([
                {"index": 1, "score": 0.9}, {"index": 0, "score": 0.1}
            ]))
        })
        .mount(&api)
        .await;
    let embedder = OpenAiEmbedder::new(
        "e",
        RetrievalServiceConfig::new(format!("{}/v1", api.uri()), "m"),
        16,
    )
    .unwrap();
    let e = embedder.embed(&["a", "b"]).await.unwrap_err();
    assert!(
        e.message.contains("index 5 twice or out of range (0..2)"),
        "{e}"
    );
    assert!(!e.is_timeout());
    let reranker = HttpReranker::new(
        "t",
        RetrievalServiceConfig::new(format!("{}/tei", api.uri()), "m"),
        RerankApi::Tei,
    )
    .unwrap();
    let scored = reranker.rerank("q", &["x", "y"]).await.unwrap();
    assert_eq!(scored, [(1, 0.9), (0, 0.1)]);
    assert_eq!(
        tei.bodies.lock().unwrap()[0],
        json!({"query": "q", "texts": ["x", "y"]})
    );
    // A key never shows in an error.
    let mut config = RetrievalServiceConfig::new("http://127.0.0.1:9/v1", "m");
    config.api_key = Some("sk-secret-123".into());
    config.timeout = Duration::from_millis(500);
    let e = OpenAiEmbedder::new("e", config, 8)
        .unwrap()
        .embed(&["a"])
        .await
        .unwrap_err();
    assert!(
        e.message.contains("cannot connect") && !e.to_string().contains("sk-secret"),
        "{e}"
    );
}

#[test]
fn hostpipe_eval_measures_answer_recall_per_budget() {
    let dir = tempfile::tempdir().unwrap();
    let python = hostpipe_tests::root().join("tests/.venv/bin/python");
    let server = hostpipe_tests::root().join("tests/servers/manuals_server.py");
    let config = dir.path().join("hostpipe.toml");
    std::fs::write(
        &config,
        format!(
            r#"
[store]
url = "none"
[mcp_servers.manuals]
command = "{}"
args = ["{}"]
[pipelines.default]
runner = "preview"
[pipelines.default.bind_mcp_servers]
servers = ["manuals"]
"#,
            python.display(),
            server.display()
        ),
    )
    .unwrap();
    let attach: Vec<serde_json::Value> = MANUALS
        .iter()
        .map(|u| json!({"server": "manuals", "uri": u}))
        .collect();
    let questions = [
        json!({"id": "gate", "question": "What is the gate code for visitors?", "answers": ["gate code 4417"], "attach": attach}),
        json!({"id": "cache", "question": "计算属性会缓存吗？", "answers": ["仅会在其响应式依赖更新时才重新计算"], "attach": attach}),
        // No passage says it: a miss at every budget.
        json!({"id": "moon", "question": "How far away is the moon?", "answers": ["384,400 km"], "attach": attach}),
    ];
    let file = dir.path().join("questions.jsonl");
    std::fs::write(
        &file,
        questions
            .iter()
            .map(|q| format!("{q}\n"))
            .collect::<String>(),
    )
    .unwrap();
    let out = hostpipe_tests::hostpipe_command()
        .args(["--config"])
        .arg(&config)
        .args(["eval", "--budgets", "200,1000", "--json"])
        .arg(&file)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["pipeline"], "default");
    for (b, budget) in report["budgets"]
        .as_array()
        .unwrap()
        .iter()
        .zip([200, 1000])
    {
        assert_eq!(b["budget"], budget);
        assert_eq!(b["questions"], 3);
        assert_eq!(b["answered"], 2, "{b}");
        assert_eq!(b["misses"], json!(["moon"]));
        assert!(b["max_tokens"].as_u64().unwrap() <= budget);
    }
    // The table, for people.
    let out = hostpipe_tests::hostpipe_command()
        .args(["--config"])
        .arg(&config)
        .args(["eval", "--budgets", "200"])
        .arg(&file)
        .output()
        .unwrap();
    let table = String::from_utf8(out.stdout).unwrap();
    assert!(
        table.contains("| 200 | 66.7% | 2/3 |") && table.contains("missed at 200: moon"),
        "{table}"
    );
    // A bad line is named.
    std::fs::write(&file, "{\"question\": \"x?\"}\n").unwrap();
    let out = hostpipe_tests::hostpipe_command()
        .args(["--config"])
        .arg(&config)
        .args(["eval"])
        .arg(&file)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(
        stderr.contains("questions.jsonl:1: missing field `answers`"),
        "{stderr}"
    );
}
