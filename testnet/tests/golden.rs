//! Golden outputs of `--mode sim`: `metrics.jsonl` for a fixed seed on synthetic data (EL and Shatter) and on
//! MovieLens (Shatter, the reference's matrix factorisation). Recorded before the round engine was reshaped
//! (one routing layer, one algorithm trait); a refactor must reproduce them byte for byte. The three
//! wall-clock fields (`train_secs`, `eval_secs`, `aggregate_secs`: real seconds of this machine, the only
//! fields the simulator does not fix) are zeroed before comparing. A deliberate behaviour change re-records
//! them with `SHATTER_BLESS=1 cargo test -p testnet --test golden` and says why in its commit.

use std::path::{Path, PathBuf};

use testnet::cli::{Mode, Options};
use testnet::scenario::Settings;

const WALL_CLOCK_FIELDS: [&str; 3] = ["train_secs", "eval_secs", "aggregate_secs"];

fn golden(name: &str, actual: &str) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(name);
    if std::env::var_os("SHATTER_BLESS").is_some() {
        std::fs::write(&path, actual).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (record with SHATTER_BLESS=1)", path.display()));
    assert!(
        expected == actual,
        "{} differs from this run's output:\n{actual}",
        path.display()
    );
}

/// `metrics.jsonl` with the wall-clock fields zeroed, key order as written.
fn normalised_metrics(out: &Path) -> String {
    let text = std::fs::read_to_string(out.join("metrics.jsonl")).unwrap();
    let mut s = String::new();
    for line in text.lines() {
        let mut v: serde_json::Value = serde_json::from_str(line).unwrap();
        for f in WALL_CLOCK_FIELDS {
            assert!(v.get(f).is_some(), "{f} missing in {line}");
            v[f] = serde_json::json!(0.0);
        }
        s.push_str(&serde_json::to_string(&v).unwrap());
        s.push('\n');
    }
    s
}

fn sim_options(out: &Path) -> Options {
    Options {
        mode: Some(Mode::Sim),
        nodes: Some(4),
        degree: Some(2),
        rounds: Some(3),
        seed: Some(11),
        test_samples: Some(200),
        out: Some(out.to_path_buf()),
        plain: true,
        ..Default::default()
    }
}

#[test]
fn sim_synthetic_el_and_shatter_match_their_golden_metrics() {
    let dir = tempfile::tempdir().unwrap();
    let mut o = sim_options(dir.path());
    o.vns = Some(vec![1, 3]);
    o.model = Some("mlp:16".parse().unwrap());
    o.local_steps = Some(5);
    let report = testnet::run(&Settings::resolve(o).unwrap()).unwrap();
    assert!(!report.failed);
    golden(
        "sim_synthetic_k1_k3_seed11.jsonl",
        &normalised_metrics(dir.path()),
    );
}

#[test]
fn sim_movielens_matches_its_golden_metrics() {
    let data = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../shared/data/movielens/ml-latest-small");
    if !data.is_dir() {
        eprintln!("note: {} is absent; skipping", data.display());
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut o = sim_options(dir.path());
    o.vns = Some(vec![2]);
    o.dataset = Some(testnet::cli::DatasetName::Movielens);
    o.data_dir = Some(data);
    o.local_steps = Some(10);
    let report = testnet::run(&Settings::resolve(o).unwrap()).unwrap();
    assert!(!report.failed);
    golden(
        "sim_movielens_k2_seed11.jsonl",
        &normalised_metrics(dir.path()),
    );
}
