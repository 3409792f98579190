//! A real browser at the live view: headless Debian chromium, driven by playwright-core
//! (`results/live-view/browser.mjs`), opens the page during a default run (8 nodes × 4 VNs, 20 rounds), sees
//! the round counter advance and the curves and the overlay drawn, and saves screenshots into
//! `results/live-view/`. Needs chromium and Node.js, which CI does not have, hence ignored. Run it with:
//!
//! ```sh
//! apt-get install -y chromium nodejs npm
//! (cd results/live-view && npm install)
//! cargo test -p testnet --test live_browser -- --ignored
//! ```

use std::path::Path;
use std::process::{Command, Stdio};

#[test]
#[ignore = "needs chromium and Node.js with playwright-core: see the module doc"]
fn a_real_browser_sees_the_rounds_advance_and_the_curves_and_graph_drawn() {
    let results = Path::new(env!("CARGO_MANIFEST_DIR")).join("../results/live-view");
    let out = tempfile::tempdir().unwrap();
    let addr = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let mut testnet = Command::new(env!("CARGO_BIN_EXE_testnet"))
        .args(["--plain", "--ui", &addr.to_string(), "--out"])
        .arg(out.path())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let browser = Command::new("node")
        .arg(results.join("browser.mjs"))
        .arg(format!("http://{addr}/"))
        .arg(&results)
        .status();
    // The testnet serves until Ctrl-C: stop it either way.
    let _ = testnet.kill();
    let _ = testnet.wait();
    assert!(
        browser.expect("node runs").success(),
        "the browser's checks failed (their reasons are printed above)"
    );
    for shot in ["live-during-run.png", "live.png", "overlay-audit-view.png"] {
        assert!(results.join(shot).exists(), "{shot}");
    }
}
