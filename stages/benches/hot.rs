//! Criterion benchmarks of the injection hot path: token counting, passage splitting and
//! indexing, the turn-wide ranking, a whole fit (cold and warm), truncation and image
//! downscaling. Run with `cargo bench -p hostpipe-stages`.
#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::hint::black_box;
use std::io::Cursor;

use criterion::{Criterion, criterion_group, criterion_main};
use hostpipe_core::{Encoding, ModelProfile, ResourceContents, Tokenizer, TruncationSide};
use std::sync::Arc;

use hostpipe_core::{BlockSource, Scope};
use hostpipe_stages::convert::{ConvertLimits, Converted, ResourceMeta, convert};
use hostpipe_stages::fit::{Caches, FitOptions, FitQuery, Item, Strategy, fit};
use hostpipe_stages::index::{DocIndex, Query, RankInput, rank};
use hostpipe_stages::lexical::{Analyzer, Language};
use hostpipe_stages::passage::{SplitKind, split};

const WORDS: &[&str] = &[
    "pipeline",
    "stage",
    "runner",
    "resource",
    "context",
    "token",
    "budget",
    "server",
    "client",
    "template",
    "subscription",
    "cache",
    "chunk",
    "summary",
    "image",
    "blob",
    "mime",
    "policy",
    "audit",
    "conversation",
    "message",
    "attachment",
    "binding",
    "latency",
    "throughput",
    "memory",
    "error",
    "retry",
    "timeout",
    "session",
];

/// A deterministic markdown document of about `bytes` bytes, shaped like the
/// side-by-side benchmark's documents (sections of 40–120 words, code every fifth).
fn doc(bytes: usize, seed: u64) -> String {
    let mut s = String::from("# Document\n");
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15 ^ seed.wrapping_mul(0x2545_f491_4f6c_dd1d);
    let mut next = |n: usize| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        (x % n as u64) as usize
    };
    let mut sec = 0;
    while s.len() < bytes {
        sec += 1;
        s.push_str(&format!(
            "\n## Section {sec}: {} {}\n\n",
            WORDS[next(WORDS.len())],
            WORDS[next(WORDS.len())]
        ));
        for _ in 0..40 + next(80) {
            s.push_str(WORDS[next(WORDS.len())]);
            s.push(' ');
        }
        s.push_str(".\n");
        if sec % 5 == 0 {
            s.push_str(&format!(
                "\n```rust\nfn f(x: u32) -> u32 {{ x + {sec} }}\n```\n"
            ));
        }
    }
    s.truncate(s.floor_char_boundary(bytes));
    s
}

fn options(caches: Arc<Caches>) -> FitOptions {
    FitOptions {
        truncate: TruncationSide::Head,
        passage_tokens: 384,
        min_block_tokens: 64,
        max_passages: 32,
        history_messages: 2,
        history_weight: 0.3,
        summarizer: None,
        analyzer: Arc::new(Analyzer::new(Language::English)),
        retrieval: None,
        caches,
    }
}

fn items(docs: &[String]) -> Vec<Item> {
    docs.iter()
        .enumerate()
        .map(|(i, d)| Item {
            source: BlockSource {
                server: "bench".into(),
                uri: format!("bench://doc/{i}"),
                template: None,
                scope: Scope::Pipeline,
                name: None,
            },
            mime_type: Some("text/markdown".into()),
            converted: Converted::Text(d.clone()),
            must: false,
            must_scope: Scope::Pipeline,
            priority: 0.5,
            strategy: Strategy::Auto,
            text_hash: None,
        })
        .collect()
}

fn benches(c: &mut Criterion) {
    let tk = Tokenizer::new(Encoding::O200kBase).unwrap();
    let text = doc(256 * 1024, 0);
    let analyzer = Analyzer::new(Language::English);
    let message = "how does the cache handle subscription timeout";

    c.bench_function("count_tokens_256k", |b| {
        b.iter(|| tk.count(black_box(&text)))
    });
    c.bench_function("truncate_256k_to_2000", |b| {
        b.iter(|| {
            tk.truncate(black_box(&text), 2000, TruncationSide::HeadTail)
                .unwrap()
        })
    });
    c.bench_function("passage_split_256k", |b| {
        b.iter(|| split(black_box(&text), SplitKind::Markdown, 384))
    });
    c.bench_function("passage_index_256k", |b| {
        b.iter(|| DocIndex::build(black_box(&text), SplitKind::Markdown, 384, &analyzer))
    });
    let docs: Vec<String> = (0..16).map(|i| doc(256 * 1024, i)).collect();
    let indexes: Vec<DocIndex> = docs
        .iter()
        .map(|d| DocIndex::build(d, SplitKind::Markdown, 384, &analyzer))
        .collect();
    let fields: Vec<String> = Vec::new();
    let inputs: Vec<RankInput<'_>> = indexes
        .iter()
        .map(|index| RankInput {
            index,
            field_terms: &fields,
        })
        .collect();
    let query = Query::new(&analyzer, message, &[], 2, 0.3);
    c.bench_function("rank_16x256k", |b| {
        b.iter(|| rank(black_box(&inputs), &query))
    });
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let q = FitQuery {
        message,
        history: &[],
    };
    let mut group = c.benchmark_group("fit");
    group.sample_size(10);
    group.bench_function("fit_16x256k_8000_cold", |b| {
        b.iter(|| {
            let opts = options(Arc::new(Caches::default()));
            rt.block_on(fit(items(&docs), 8000, q, &tk, &opts))
        })
    });
    let warm = options(Arc::new(Caches::default()));
    group.bench_function("fit_16x256k_8000_warm", |b| {
        b.iter(|| rt.block_on(fit(items(&docs), 8000, q, &tk, &warm)))
    });
    group.finish();

    let mut png = Vec::new();
    image::RgbImage::from_fn(4000, 3000, |x, y| {
        image::Rgb([(x % 256) as u8, (y % 256) as u8, 128])
    })
    .write_to(&mut Cursor::new(&mut png), image::ImageFormat::Png)
    .unwrap();
    let model = ModelProfile::default();
    let mut group = c.benchmark_group("image");
    group.sample_size(10);
    group.bench_function("downscale_4000x3000_png", |b| {
        b.iter(|| {
            let blob = ResourceContents::Blob {
                uri: "x://i".into(),
                mime_type: Some("image/png".into()),
                data: png.clone(),
            };
            convert(
                blob,
                &ResourceMeta::default(),
                &model,
                &ConvertLimits::default(),
            )
        })
    });
    group.finish();
}

criterion_group!(hot, benches);
criterion_main!(hot);
