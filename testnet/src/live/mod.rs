//! The live view: `testnet --ui ADDR` serves a page that follows the run as it goes (and stays up after it
//! ends, until Ctrl-C); `testnet view DIR` serves a finished run's directory the same way.
//!
//! - `event.rs`: [`LiveEvent`], what the page is told: the run, each setting, every node's every round, the
//!   overlays the testnet saw, the audit's figures, the end.
//! - `feed.rs`: [`LiveFeed`], the events so far plus a broadcast of new ones, so that a page opened late (or
//!   reloaded) first gets everything that happened.
//! - `overlay.rs`: [`OverlayRecorder`], an observer that rebuilds each round's VN overlay from the copies
//!   the VNs accepted (what only the testnet, holding every node's keys, can see).
//! - `server.rs`: [`LiveServer`], axum on a thread of its own: the page, `/events` (server-sent events) and
//!   `/metrics` (the in-process nodes' Prometheus metrics, labelled by node).
//! - `view.rs`: `testnet view DIR`, a finished run's files as events.
//! - `page.html`: the page (HTML, vanilla JS, SVG; embedded in the binary, nothing fetched from elsewhere).

mod event;
mod feed;
mod overlay;
mod server;
pub mod view;

pub use event::{AuditRound, LiveEvent};
pub use feed::{LiveFeed, LiveSetting};
pub use overlay::OverlayRecorder;
pub use server::LiveServer;

/// A setting ended: its audit's figures (with `--audit`) and its wall time.
pub fn publish_setting_end(feed: &LiveFeed, k: usize, out: &crate::RunOutput) {
    if let Some(a) = &out.audit {
        feed.publish(&LiveEvent::Audit {
            k,
            rounds: a
                .rounds
                .iter()
                .map(|r| AuditRound {
                    round: r.round,
                    mia_auc: r.summary.mia_auc_mean,
                    la_success: r.summary.la_success,
                    la_chance: r.summary.la_chance,
                })
                .collect(),
            linkage_auc: out
                .extra
                .get("linkage")
                .and_then(|l| l["chunks"]["auc_pooled"].as_f64()),
        });
    }
    feed.publish(&LiveEvent::SettingDone {
        k,
        wall_secs: out.wall_secs,
    });
}

/// Blocks until Ctrl-C (the live view keeps serving meanwhile).
pub fn wait_for_ctrl_c() {
    match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => {
            let _ = rt.block_on(tokio::signal::ctrl_c());
        }
        Err(e) => eprintln!("cannot wait for Ctrl-C ({e}); exiting"),
    }
}
