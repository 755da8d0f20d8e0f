//! The fuzz targets (`hostpipe_cli::fuzzing`, run by cargo-fuzz from `tests/fuzz`) over
//! their corpus, and over deterministic mutations of it: no panic on any of it.

use std::path::Path;

/// Each corpus file, then 300 mutations of it (bytes flipped, inserted, deleted, and
/// halves swapped), from a fixed seed so that a failure reproduces.
#[test]
fn the_fuzz_targets_survive_their_corpus_and_its_mutations() {
    let corpus = hostpipe_tests::root().join("tests/fuzz/corpus");
    let mut rng = fastrand::Rng::with_seed(0x5eed_f00d);
    let mut runs = 0;
    for (name, target) in hostpipe_cli::fuzzing::TARGETS {
        let dir = corpus.join(name);
        let mut files: Vec<_> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .map(|e| e.unwrap().path())
            .collect();
        files.sort();
        assert!(files.len() >= 3, "{name}: a corpus of at least 3 files");
        for file in files {
            let seed = std::fs::read(&file).unwrap();
            run(name, &file, target, &seed);
            for i in 0..300 {
                let input = mutate(&mut rng, &seed);
                runs += 1;
                if let Err(panic) = std::panic::catch_unwind(|| target(&input)) {
                    panic!(
                        "{name}: mutation {i} of {} panicked ({:?}); input: {:?}",
                        file.display(),
                        panic.downcast_ref::<String>(),
                        String::from_utf8_lossy(&input)
                    );
                }
            }
        }
    }
    assert!(runs > 4000, "{runs}");
}

fn run(name: &str, file: &Path, target: fn(&[u8]), input: &[u8]) {
    if std::panic::catch_unwind(|| target(input)).is_err() {
        panic!("{name}: {} panicked", file.display());
    }
}

fn mutate(rng: &mut fastrand::Rng, seed: &[u8]) -> Vec<u8> {
    let mut out = seed.to_vec();
    for _ in 0..rng.usize(1..6) {
        let at = if out.is_empty() {
            0
        } else {
            rng.usize(..out.len())
        };
        match rng.u8(..5) {
            0 if !out.is_empty() => out[at] ^= 1 << rng.u8(..8),
            1 => out.insert(
                at,
                *b"{}/%\"<>\0\n\\#+?*[".get(rng.usize(..15)).unwrap_or(&b'x'),
            ),
            2 if !out.is_empty() => {
                out.remove(at);
            }
            3 => {
                let c = char::from_u32(rng.u32(0x80..0x11_0000)).unwrap_or('ç');
                let mut buf = [0; 4];
                for (k, b) in c.encode_utf8(&mut buf).bytes().enumerate() {
                    out.insert((at + k).min(out.len()), b);
                }
            }
            _ => {
                let mid = out.len() / 2;
                out.rotate_left(mid);
            }
        }
    }
    out
}
