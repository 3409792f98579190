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

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use anyhow::bail;
use serde::{Deserialize, Serialize};

/// `--kill FRACTION@ROUND`, parsed once (command line and scenario file alike).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Kill {
    pub fraction: f64,
    pub round: u64,
}

/// `--pause FRACTION@ROUND:ROUNDS`, parsed once (command line and scenario file alike).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Pause {
    pub fraction: f64,
    pub round: u64,
    pub rounds: u64,
}

const KILL_FORM: &str = "expected FRACTION@ROUND with FRACTION in (0, 1), e.g. 0.25@5";
const PAUSE_FORM: &str = "expected FRACTION@ROUND:ROUNDS with FRACTION in (0, 1), e.g. 0.125@4:5";

impl FromStr for Kill {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let bad = |why: String| format!("{why}: {KILL_FORM}");
        let (f, r) = s.split_once('@').ok_or_else(|| bad(format!("{s:?}")))?;
        Ok(Kill {
            fraction: fraction(f).map_err(bad)?,
            round: number("ROUND", r).map_err(bad)?,
        })
    }
}

impl FromStr for Pause {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let bad = |why: String| format!("{why}: {PAUSE_FORM}");
        let (f, rest) = s.split_once('@').ok_or_else(|| bad(format!("{s:?}")))?;
        let (r, n) = rest.split_once(':').ok_or_else(|| bad(format!("{s:?}")))?;
        Ok(Pause {
            fraction: fraction(f).map_err(bad)?,
            round: number("ROUND", r).map_err(bad)?,
            rounds: number("ROUNDS", n).map_err(bad)?,
        })
    }
}

impl fmt::Display for Kill {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}@{}", self.fraction, self.round)
    }
}

impl fmt::Display for Pause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}@{}:{}", self.fraction, self.round, self.rounds)
    }
}

// Scenario files carry the same text as the command line.
impl TryFrom<String> for Kill {
    type Error = String;
    fn try_from(s: String) -> Result<Self, String> {
        s.parse()
    }
}

impl From<Kill> for String {
    fn from(k: Kill) -> String {
        k.to_string()
    }
}

impl TryFrom<String> for Pause {
    type Error = String;
    fn try_from(s: String) -> Result<Self, String> {
        s.parse()
    }
}

impl From<Pause> for String {
    fn from(p: Pause) -> String {
        p.to_string()
    }
}

/// What happens to node processes during a procs run.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ChurnPlan {
    pub kill: Option<Kill>,
    pub restart_after: Option<Duration>,
    pub pause: Option<Pause>,
}

impl ChurnPlan {
    /// The plan of `--kill`, `--restart-after` and `--pause`, already parsed: checks what only the three
    /// together can say.
    pub fn new(
        kill: Option<Kill>,
        restart_after: Option<f64>,
        pause: Option<Pause>,
    ) -> anyhow::Result<Self> {
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

fn fraction(f: &str) -> Result<f64, String> {
    let v: f64 = f
        .parse()
        .map_err(|_| format!("FRACTION {f:?} is not a number"))?;
    if !(v > 0.0 && v < 1.0) {
        return Err(format!("FRACTION {v} is not in (0, 1)"));
    }
    Ok(v)
}

fn number(what: &str, n: &str) -> Result<u64, String> {
    n.parse()
        .map_err(|_| format!("{what} {n:?} is not a round number"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plans_parse_and_pick_the_last_nodes() {
        let kill: Kill = "0.25@5".parse().unwrap();
        let pause: Pause = "0.125@4:5".parse().unwrap();
        let p = ChurnPlan::new(Some(kill), Some(3.0), Some(pause)).unwrap();
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
        assert_eq!(
            (kill.to_string(), pause.to_string()),
            ("0.25@5".into(), "0.125@4:5".into())
        );
        assert_eq!(ChurnPlan::victims(0.25, 8), vec![7, 6]);
        assert_eq!(ChurnPlan::victims(0.125, 8), vec![7]);
        assert_eq!(ChurnPlan::victims(0.99, 2), vec![1], "never node 0");
        for bad in ["1.5@2", "0.5", "x@2", "0.5@y", "0@2"] {
            let e = bad.parse::<Kill>().unwrap_err();
            assert!(e.contains("FRACTION@ROUND"), "{e}");
        }
        for bad in ["0.5@3", "0.5@3:x", "2@3:1"] {
            let e = bad.parse::<Pause>().unwrap_err();
            assert!(e.contains("FRACTION@ROUND:ROUNDS"), "{e}");
        }
        assert!(ChurnPlan::new(None, Some(1.0), None).is_err());
        assert!(ChurnPlan::new(Some(kill), Some(-1.0), None).is_err());
    }
}
