//! The `testnet` binary's command line: grouped help, typed values refused at parse time, and options that
//! the chosen mode would ignore refused before anything runs. Nothing here starts a network.

use std::process::{Command, Output};

fn testnet(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_testnet"))
        .args(args)
        .output()
        .unwrap()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn help_groups_the_options_by_what_they_act_on() {
    let out = testnet(&["--help"]);
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    let mut last = 0;
    for heading in [
        "Options:",
        "Network:",
        "Learning:",
        "Timing:",
        "Adversaries and audit:",
        "Processes (--mode procs):",
    ] {
        let at = help
            .find(&format!("\n{heading}\n"))
            .unwrap_or_else(|| panic!("no {heading:?} in:\n{help}"));
        assert!(at > last, "{heading} out of order:\n{help}");
        last = at;
    }
}

#[test]
fn a_procs_only_option_is_refused_in_sim_and_inproc() {
    for mode in ["sim", "inproc"] {
        for args in [
            &["--kill", "0.25@5"][..],
            &["--node-bin", "target/debug/node"],
            &["--observe-timing"],
        ] {
            let out = testnet(&[&["--mode", mode], args].concat());
            assert!(!out.status.success());
            let err = stderr(&out);
            assert!(
                err.contains(&format!(
                    "{} applies only to --mode procs, not to --mode {mode}",
                    args[0]
                )),
                "{err}"
            );
        }
    }
}

#[test]
fn a_scenario_file_cannot_slip_an_option_past_its_mode() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("s.toml");
    std::fs::write(&file, "mode = \"sim\"\ntiming = \"lan\"\n").unwrap();
    let out = testnet(&["--scenario", file.to_str().unwrap()]);
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(
        err.contains("--timing applies only to --mode inproc or procs, not to --mode sim"),
        "{err}"
    );
}

#[test]
fn bad_typed_values_are_refused_before_anything_runs() {
    let out = testnet(&["--dataset", "imagenet"]);
    assert_eq!(out.status.code(), Some(2), "a usage error");
    let err = stderr(&out);
    assert!(
        err.contains("--dataset") && err.contains("movielens") && err.contains("mnist"),
        "{err}"
    );
    let out = testnet(&["--pause", "0.5@3"]);
    assert_eq!(out.status.code(), Some(2), "a usage error");
    let err = stderr(&out);
    assert!(
        err.contains("--pause") && err.contains("FRACTION@ROUND:ROUNDS"),
        "{err}"
    );
}

#[test]
fn an_unknown_scenario_key_is_still_refused() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("typo.toml");
    std::fs::write(&file, "mode = \"sim\"\nvn_host = 2\n").unwrap();
    let out = testnet(&["--scenario", file.to_str().unwrap()]);
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(
        err.contains("typo.toml")
            && err.contains("line 2")
            && err.contains("unknown field `vn_host`"),
        "{err}"
    );
}
