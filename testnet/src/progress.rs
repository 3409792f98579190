//! Live progress: an `indicatif` bar on a terminal, plain lines elsewhere (CI logs get no escape codes).
//! Either way one line per completed round (every RN reported it): mean test metric, bytes, round time.

use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::time::Instant;

use indicatif::{ProgressBar, ProgressStyle};
use node::engine::RoundMetrics;

#[derive(Default)]
struct RoundAgg {
    count: usize,
    metric: f64,
    bytes: u64,
    secs: f64,
    name: String,
}

/// Progress of one setting (one value of k).
pub struct Progress {
    bar: Option<ProgressBar>,
    label: String,
    nodes: usize,
    total_rounds: u64,
    rounds: BTreeMap<u64, RoundAgg>,
    started: Instant,
    /// `--ui`: the live view's feed of this setting.
    live: Option<crate::live::LiveSetting>,
}

/// Whether a bar can be drawn: stderr is a terminal and the user did not ask for plain lines.
pub fn use_bar(plain: bool) -> bool {
    !plain && std::io::stderr().is_terminal()
}

impl Progress {
    pub fn new(label: String, nodes: usize, rounds: u64, bar: bool) -> Self {
        let bar = bar.then(|| {
            let b = ProgressBar::new(nodes as u64 * rounds);
            b.set_style(
                ProgressStyle::with_template("{prefix:.bold} [{elapsed_precise}] {bar:30.cyan/blue} {pos}/{len} RN-rounds  {msg}")
                    .expect("valid template")
                    .progress_chars("=> "),
            );
            b.set_prefix(label.clone());
            b.set_message("warming up (peer sampling)…");
            b.enable_steady_tick(std::time::Duration::from_millis(200));
            b
        });
        if bar.is_none() {
            eprintln!("{label}: {nodes} nodes, {rounds} rounds");
        }
        // Elapsed wall-clock time shown beside the rounds.
        #[allow(clippy::disallowed_methods)]
        let started = Instant::now();
        Self {
            bar,
            label,
            nodes,
            total_rounds: rounds,
            rounds: BTreeMap::new(),
            started,
            live: None,
        }
    }

    /// Also tells the live view (`--ui`) every round.
    pub fn with_live(mut self, live: Option<crate::live::LiveSetting>) -> Self {
        self.live = live;
        self
    }

    /// The live view's setting, if the run has one: a mode that knows the overlay hands it its recorder, and
    /// in-process nodes register their metrics in its registry.
    pub fn live_mut(&mut self) -> Option<&mut crate::live::LiveSetting> {
        self.live.as_mut()
    }

    /// One RN finished one round.
    pub fn on_round(&mut self, rn: usize, m: &RoundMetrics) {
        let agg = self.rounds.entry(m.round.get()).or_default();
        agg.count += 1;
        agg.metric += m.test_metric;
        agg.bytes += m.bytes_sent;
        agg.secs += m.round_secs;
        agg.name = m.metric_name.to_string();
        let complete = agg.count == self.nodes;
        if let Some(live) = &self.live {
            live.round(rn, m);
            if complete {
                live.round_complete(m.round.get());
            }
        }
        let line = complete.then(|| {
            let n = self.nodes as f64;
            format!(
                "{}: round {:>3}/{}  {} {:.4}  sent {}/RN  round {:.2} s  [{:.0} s]",
                self.label,
                m.round + 1,
                self.total_rounds,
                agg.name,
                agg.metric / n,
                human_bytes(agg.bytes as f64 / n),
                agg.secs / n,
                self.started.elapsed().as_secs_f64()
            )
        });
        match (&self.bar, line) {
            (Some(b), Some(line)) => {
                b.inc(1);
                b.set_message(format!(
                    "round {}: {} {:.4}, {}/RN",
                    m.round + 1,
                    agg.name,
                    agg.metric / self.nodes as f64,
                    human_bytes(agg.bytes as f64 / self.nodes as f64)
                ));
                b.println(line);
            }
            (Some(b), None) => b.inc(1),
            (None, Some(line)) => eprintln!("{line}"),
            (None, None) => {}
        }
    }

    /// A note (a node's error, an interruption) that must not garble the bar.
    pub fn note(&self, msg: &str) {
        match &self.bar {
            Some(b) => b.println(msg),
            None => eprintln!("{msg}"),
        }
    }

    pub fn finish(self) {
        if let Some(b) = self.bar {
            b.finish_and_clear();
        }
        eprintln!(
            "{}: done in {:.1} s",
            self.label,
            self.started.elapsed().as_secs_f64()
        );
    }
}

/// `12.3 KiB`.
pub fn human_bytes(b: f64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{v:.0} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_are_human() {
        assert_eq!(human_bytes(12.0), "12 B");
        assert_eq!(human_bytes(1536.0), "1.5 KiB");
        assert_eq!(human_bytes(3.0 * 1024.0 * 1024.0), "3.0 MiB");
    }

    #[test]
    fn plain_progress_counts_complete_rounds() {
        let mut p = Progress::new("t".into(), 2, 3, false);
        let m = RoundMetrics {
            round: protocol::Round(0),
            metric_name: models::train::MetricKind::Accuracy,
            test_metric: 0.5,
            ..Default::default()
        };
        p.on_round(0, &m);
        p.on_round(1, &m);
        assert_eq!(p.rounds[&0].count, 2);
        p.finish();
    }
}
