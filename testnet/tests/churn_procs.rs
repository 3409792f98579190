//! Issue 15's procs scenarios as assertions: real `node` processes SIGKILLed mid-run and restarted with
//! `--resume`, and one SIGSTOPped for five rounds. Ignored in CI (about a minute each in a debug build, and
//! timing-dependent on a loaded machine); run with
//!
//! ```sh
//! cargo build -p node && cargo test -p testnet --test churn_procs -- --ignored --test-threads 1
//! ```
//!
//! The same scenarios over three seeds, with a clean run for comparison: `results/churn-procs/run.sh`.
//! Timing-dependent: on two cores shared with other builds the pause test failed once in its first two runs
//! (the paused node finished but never counted as in step: at most one round behind with copies), and passed
//! on the second; the kill test passed.

use std::path::Path;

use testnet::cli::{Mode, Options};
use testnet::scenario::Settings;

const ROUNDS: u64 = 25;

fn run(
    out: &Path,
    kill: Option<&str>,
    restart: Option<f64>,
    pause: Option<&str>,
) -> serde_json::Value {
    let o = Options {
        mode: Some(Mode::Procs),
        nodes: Some(8),
        vns: Some(vec![2]),
        rounds: Some(ROUNDS),
        local_epochs: Some(5),
        seed: Some(1),
        kill: kill.map(|k| k.parse().unwrap()),
        restart_after: restart,
        pause: pause.map(|p| p.parse().unwrap()),
        out: Some(out.to_path_buf()),
        plain: true,
        ..Default::default()
    };
    let report = testnet::run(&Settings::resolve(o).unwrap()).unwrap();
    assert!(!report.failed);
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    match summary {
        serde_json::Value::Array(mut a) => a.remove(0),
        one => one,
    }
}

#[test]
#[ignore = "a minute of real node processes; see the module docs"]
fn killed_nodes_resume_and_finish_and_lose_no_metrics_line() {
    let dir = tempfile::tempdir().unwrap();
    let s = run(dir.path(), Some("0.25@6"), Some(3.0), None);
    let churn = &s["churn"];
    for v in churn["killed"].as_array().unwrap() {
        assert_eq!(v["last_round"], ROUNDS - 1, "finished: {v}");
        assert_eq!(v["metrics_lines_lost"], 0, "{v}");
        assert_eq!(v["metrics_lines_duplicated"], 0, "{v}");
        assert!(
            v["rejoined_at_round"].is_u64(),
            "back in step with the others: {v}"
        );
    }
    for o in churn["others"].as_array().unwrap() {
        // Every round is completed or, where the node found the others ahead, skipped to catch up.
        let done = o["rounds_completed"].as_u64().unwrap() + o["skipped_rounds"].as_u64().unwrap();
        assert_eq!(done, ROUNDS, "{o}");
    }
}

#[test]
#[ignore = "a minute of real node processes; see the module docs"]
fn a_node_paused_for_five_rounds_catches_up_and_finishes() {
    let dir = tempfile::tempdir().unwrap();
    let s = run(dir.path(), None, None, Some("0.125@4:5"));
    let v = &s["churn"]["paused"][0];
    assert_eq!(v["last_round"], ROUNDS - 1, "finished: {v}");
    assert!(
        v["skipped_rounds"].as_u64().unwrap() > 0,
        "caught up by skipping: {v}"
    );
    assert!(
        v["rejoined_at_round"].is_u64(),
        "back in step with the others: {v}"
    );
}
