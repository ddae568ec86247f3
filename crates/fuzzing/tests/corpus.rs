//! Replays the saved fuzz corpus and every named regression input through the
//! checks the fuzz targets run (`ramstore_fuzzing::TARGETS`), on stable Rust: a
//! corpus entry that makes a check panic fails this test with its file name.

use std::path::{Path, PathBuf};

fn inputs(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    files
}

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz")
}

fn replay(target: &str, check: ramstore_fuzzing::Check) -> usize {
    let mut n = 0;
    for sub in ["corpus", "regressions"] {
        for file in inputs(&fuzz_dir().join(sub).join(target)) {
            let data = std::fs::read(&file).unwrap();
            let outcome = std::panic::catch_unwind(|| check(&data));
            assert!(
                outcome.is_ok(),
                "{target}: {} makes the check fail",
                file.display()
            );
            n += 1;
        }
    }
    n
}

#[test]
fn corpus_replays_cleanly_for_every_target() {
    for (target, check) in ramstore_fuzzing::TARGETS {
        let n = replay(target, check);
        // Every target has a saved corpus: a missing directory would make this
        // test pass while replaying nothing.
        assert!(n > 0, "no corpus for fuzz target {target}");
        eprintln!("{target}: {n} inputs replayed");
    }
}

#[test]
fn checks_reject_nothing_trivial() {
    // The empty input and a few fixed shapes, for every target, without a corpus.
    for (_, check) in ramstore_fuzzing::TARGETS {
        check(&[]);
        check(&[0]);
        check(&[0xff; 64]);
        check(&(0..=255u8).collect::<Vec<_>>());
    }
}
