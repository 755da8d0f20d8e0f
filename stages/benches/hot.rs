//! Criterion benchmarks of the injection hot path: token counting, chunk selection,
//! truncation and image downscaling. Run with `cargo bench -p hostpipe-stages`.
#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::hint::black_box;
use std::io::Cursor;

use criterion::{Criterion, criterion_group, criterion_main};
use hostpipe_core::{Encoding, ModelProfile, ResourceContents, Tokenizer, TruncationSide};
use hostpipe_stages::chunk;
use hostpipe_stages::convert::{ConvertLimits, ResourceMeta, convert};

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
fn doc(bytes: usize) -> String {
    let mut s = String::from("# Document\n");
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
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

fn benches(c: &mut Criterion) {
    let tk = Tokenizer::new(Encoding::O200kBase).unwrap();
    let text = doc(256 * 1024);
    let query = chunk::query_terms("how does the cache handle subscription timeout");

    c.bench_function("count_tokens_256k", |b| {
        b.iter(|| tk.count(black_box(&text)))
    });
    c.bench_function("truncate_256k_to_2000", |b| {
        b.iter(|| {
            tk.truncate(black_box(&text), 2000, TruncationSide::HeadTail)
                .unwrap()
        })
    });
    c.bench_function("chunk_split_256k", |b| {
        b.iter(|| chunk::split(black_box(&text), chunk::SplitKind::Markdown, 512))
    });
    let chunked = chunk::split(&text, chunk::SplitKind::Markdown, 512);
    c.bench_function("bm25_256k", |b| {
        b.iter(|| chunk::bm25(black_box(&text), &chunked, &query))
    });
    c.bench_function("word_index_256k", |b| {
        b.iter(|| {
            let fresh = chunk::split(&text, chunk::SplitKind::Markdown, 512);
            black_box(fresh.term_index(&text));
        })
    });
    let indexed = chunk::split(&text, chunk::SplitKind::Markdown, 512);
    indexed.term_index(&text);
    c.bench_function("bm25_256k_indexed", |b| {
        b.iter(|| chunk::bm25(black_box(&text), &indexed, &query))
    });
    let scores = chunk::bm25(&text, &chunked, &query);
    c.bench_function("select_500_of_256k", |b| {
        b.iter(|| {
            chunk::select(black_box(&text), &chunked, &scores, 500, &tk, &|s| {
                tk.count(s)
            })
        })
    });

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
