//! Churn scenarios for `--mode procs` (issue 15): real `node` processes SIGKILLed mid-run and restarted with
//! `node run --resume`, or paused with SIGSTOP and resumed with SIGCONT.
//!
//! - `--kill FRACTION@ROUND`: once any node reports round ROUND done, ⌈FRACTION · n⌉ nodes are SIGKILLed.
//! - `--restart-after SECONDS`: the killed nodes are started again that long after the kill, with
//!   `--resume` (their configs name a checkpoint directory whenever `--kill` is given).
//! - `--pause FRACTION@ROUND:ROUNDS`: once any node reports round ROUND done, ⌈FRACTION · n⌉ nodes get
//!   SIGSTOP; once any other node reports round ROUND + ROUNDS done, they get SIGCONT.
//!
//! The victims are the last nodes (n − 1, n − 2, …): never node 0, whose VNs are the bootstrap entries, so a
//! run with churn keeps the same entry point as one without.

use std::time::Duration;

use anyhow::{Context, bail};

/// `FRACTION@ROUND`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Kill {
    pub fraction: f64,
    pub round: u64,
}

/// `FRACTION@ROUND:ROUNDS`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Pause {
    pub fraction: f64,
    pub round: u64,
    pub rounds: u64,
}

/// What happens to node processes during a procs run.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ChurnPlan {
    pub kill: Option<Kill>,
    pub restart_after: Option<Duration>,
    pub pause: Option<Pause>,
}

impl ChurnPlan {
    pub fn parse(
        kill: Option<&str>,
        restart_after: Option<f64>,
        pause: Option<&str>,
    ) -> anyhow::Result<Self> {
        let kill = kill
            .map(|k| {
                let (f, r) = k
                    .split_once('@')
                    .context("--kill takes FRACTION@ROUND, e.g. 0.25@5")?;
                Ok::<_, anyhow::Error>(Kill {
                    fraction: fraction("--kill", f)?,
                    round: r.parse().context("--kill: ROUND is not a round number")?,
                })
            })
            .transpose()?;
        let pause = pause
            .map(|p| {
                let (f, rest) = p
                    .split_once('@')
                    .context("--pause takes FRACTION@ROUND:ROUNDS, e.g. 0.125@4:5")?;
                let (r, n) = rest
                    .split_once(':')
                    .context("--pause takes FRACTION@ROUND:ROUNDS, e.g. 0.125@4:5")?;
                Ok::<_, anyhow::Error>(Pause {
                    fraction: fraction("--pause", f)?,
                    round: r.parse().context("--pause: ROUND is not a round number")?,
                    rounds: n.parse().context("--pause: ROUNDS is not a number")?,
                })
            })
            .transpose()?;
        let restart_after = match restart_after {
            None => None,
            Some(s) if s.is_finite() && s >= 0.0 => Some(Duration::from_secs_f64(s)),
            Some(s) => bail!("--restart-after {s} is not a number of seconds"),
        };
        if restart_after.is_some() && kill.is_none() {
            bail!("--restart-after restarts the nodes --kill killed: give --kill too");
        }
        Ok(Self {
            kill,
            restart_after,
            pause,
        })
    }

    pub fn is_empty(&self) -> bool {
        self.kill.is_none() && self.pause.is_none()
    }

    /// The nodes a fraction of `n` picks: the last ⌈fraction · n⌉, never node 0.
    pub fn victims(fraction: f64, n: usize) -> Vec<usize> {
        let count = ((fraction * n as f64).ceil() as usize).min(n.saturating_sub(1));
        (n - count..n).rev().collect()
    }
}

fn fraction(flag: &str, f: &str) -> anyhow::Result<f64> {
    let v: f64 = f
        .parse()
        .with_context(|| format!("{flag}: FRACTION '{f}' is not a number"))?;
    if !(v > 0.0 && v < 1.0) {
        bail!("{flag}: FRACTION {v} must be in (0, 1)");
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plans_parse_and_pick_the_last_nodes() {
        let p = ChurnPlan::parse(Some("0.25@5"), Some(3.0), Some("0.125@4:5")).unwrap();
        assert_eq!(
            p.kill,
            Some(Kill {
                fraction: 0.25,
                round: 5
            })
        );
        assert_eq!(p.restart_after, Some(Duration::from_secs(3)));
        assert_eq!(
            p.pause,
            Some(Pause {
                fraction: 0.125,
                round: 4,
                rounds: 5
            })
        );
        assert_eq!(ChurnPlan::victims(0.25, 8), vec![7, 6]);
        assert_eq!(ChurnPlan::victims(0.125, 8), vec![7]);
        assert_eq!(ChurnPlan::victims(0.99, 2), vec![1], "never node 0");
        assert!(ChurnPlan::parse(Some("1.5@2"), None, None).is_err());
        assert!(ChurnPlan::parse(Some("0.5"), None, None).is_err());
        assert!(ChurnPlan::parse(None, Some(1.0), None).is_err());
        assert!(ChurnPlan::parse(None, None, Some("0.5@3")).is_err());
    }
}
