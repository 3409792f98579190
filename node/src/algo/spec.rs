//! [`AlgoSpec`]: an algorithm as a config file or a command line names it (`shatter`, `el`, `el-local`, `dpsgd`,
//! `chunking:8`, `sparsify-random:0.125`, `sparsify-topk:0.125`, `muffliato:0.025`, `ghp:0.3`, `random:0.3`), and the one place that turns the name into an
//! [`Algorithm`].

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use models::chunking::ChunkPartition;
use rand_chacha::ChaCha12Rng;
use sampling::{Stream, vn_rng};
use serde::{Deserialize, Serialize};

use super::{AlgoError, Algorithm, Dpsgd, ElLocal, Muffliato, OneChunk, Perturbed, TopK, el};

/// An algorithm and its parameter.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum AlgoSpec {
    /// Shatter with the node's k VNs (k = 1 is EL).
    Shatter,
    /// Epidemic Learning: the whole model through one VN.
    El,
    /// EL's local variant: the whole model pushed to r peers of the own Cyclon view (directed), one VN.
    ElLocal,
    /// The chunking-only ablation: one of `chunks` static chunks per round, one VN.
    Chunking { chunks: usize },
    /// Random sparsification: a fresh random `fraction` of the parameters per round, one VN.
    SparsifyRandom { fraction: f64 },
    /// Top-k sparsification: the `fraction` of the parameters that changed most this round, with their
    /// indices, one VN.
    SparsifyTopk { fraction: f64 },
    /// D-PSGD: the whole model over one static graph, one VN.
    Dpsgd,
    /// Muffliato: Gaussian noise of standard deviation `sigma`, then gossip steps over fresh overlays, one VN.
    Muffliato { sigma: f32 },
    /// Graph-homomorphic perturbations: Laplace noise of standard deviation `sigma` on every chunk, cancelled
    /// in the network average by the own term (with k VNs: Shatter + GHP).
    Ghp { sigma: f64 },
    /// The same noise without the correction (GFL's random baseline).
    RandomNoise { sigma: f64 },
    /// A/PDMM over one static graph with initial duals of standard deviation σ_Z and per-neighbour Δz frames
    /// (`pdmm:SIGMA_Z[:THETA[:RHO[:MU]]]`; `admm:SIGMA_Z` is θ = ½; `pdmm-zero:…`/`admm-zero:…` start the
    /// duals at the paper's zero mean instead of our warm start), one VN. See [`super::Pdmm`].
    Pdmm(super::PdmmParams),
}

/// Names `FromStr` knows, for error messages.
const KNOWN: &str = "shatter, el, el-local, dpsgd, chunking:K, sparsify-random:F, sparsify-topk:F, muffliato:SIGMA, \
                     ghp:SIGMA, random:SIGMA, pdmm:SIGMA_Z[:THETA[:RHO[:MU]]], admm:SIGMA_Z, pdmm-zero:…, \
                     admm-zero:…";

impl AlgoSpec {
    /// What a node with `vns` VNs ran before algorithms were named: EL with one VN, Shatter with more.
    pub fn from_vns(vns: usize) -> Self {
        if vns == 1 { Self::El } else { Self::Shatter }
    }

    /// Whether the algorithm runs with any number of VNs (Shatter's chunks); the others use one.
    pub fn uses_vns(&self) -> bool {
        matches!(
            self,
            Self::Shatter | Self::Ghp { .. } | Self::RandomNoise { .. }
        )
    }

    /// Checks the algorithm against the node's number of VNs.
    pub fn check_vns(&self, vns: usize) -> Result<(), AlgoError> {
        match self {
            _ if self.uses_vns() && vns >= 1 => Ok(()),
            _ if self.uses_vns() => Err(AlgoError::Other(format!("{self} needs at least one VN"))),
            _ if vns == 1 => Ok(()),
            _ => Err(AlgoError::Other(format!(
                "{self} sends through one identity: set the VNs to 1, not {vns}"
            ))),
        }
    }

    /// Chunks of the model partition the algorithm cuts (k for Shatter, K for chunking, 1/F for
    /// sparsification).
    pub fn chunks(&self, vns: usize) -> usize {
        match self {
            Self::Shatter | Self::Ghp { .. } | Self::RandomNoise { .. } => vns,
            Self::El
            | Self::ElLocal
            | Self::Dpsgd
            | Self::Muffliato { .. }
            | Self::SparsifyTopk { .. }
            | Self::Pdmm(_) => 1,
            Self::Chunking { chunks } => *chunks,
            Self::SparsifyRandom { fraction } => (1.0 / fraction).round() as usize,
        }
    }

    /// Exchanges per round (Muffliato's gossip steps; one for the others).
    pub fn steps(&self) -> u32 {
        match self {
            Self::Muffliato { .. } => super::GOSSIP_STEPS,
            _ => 1,
        }
    }

    /// The share of the model one RN sends to each neighbour per exchange, over all its VNs: 1 for the
    /// whole model (Shatter's k chunks together are the model), 1/K for one chunk of K.
    pub fn payload_fraction(&self, vns: usize) -> f64 {
        match self {
            Self::Chunking { .. } | Self::SparsifyRandom { .. } => 1.0 / self.chunks(vns) as f64,
            // The values and as many indices.
            Self::SparsifyTopk { fraction } => 2.0 * fraction,
            _ => 1.0,
        }
    }

    /// The algorithm of one node of a run seeded `seed`, over `partition` (cut into [`AlgoSpec::chunks`]
    /// chunks by the run's seeded partition). `private` is the node's own stream for what must stay its own —
    /// noise (GHP, `random`, Muffliato), PDMM's initial duals, `chunking`'s and `sparsify-random`'s choices:
    /// a real node draws it from its node secret ([`crate::secret`]), so that nobody who knows the run seed and
    /// the node's index can regenerate and subtract it; the simulator derives it from the run seed
    /// ([`AlgoSpec::simulated_private`]).
    pub fn build(
        &self,
        partition: Arc<ChunkPartition>,
        seed: u64,
        private: ChaCha12Rng,
    ) -> Result<Box<dyn Algorithm>, AlgoError> {
        Ok(match self {
            Self::Shatter => super::shatter_or_el(partition),
            Self::El => Box::new(el(partition)?),
            Self::ElLocal => Box::new(ElLocal::new(partition)?),
            Self::Chunking { .. } => Box::new(OneChunk::chunking(partition, private)),
            Self::SparsifyRandom { .. } => {
                Box::new(OneChunk::sparsify_random(partition, seed, private))
            }
            Self::SparsifyTopk { fraction } => Box::new(TopK::new(partition.d(), *fraction)?),
            Self::Dpsgd => Box::new(Dpsgd::new(partition)?),
            Self::Muffliato { sigma } => Box::new(Muffliato::new(partition, *sigma, private)?),
            Self::Ghp { sigma } => Box::new(Perturbed::new(partition, *sigma, true, private)?),
            Self::RandomNoise { sigma } => {
                Box::new(Perturbed::new(partition, *sigma, false, private)?)
            }
            Self::Pdmm(p) => {
                let name = if p.theta == 0.5 { "admm" } else { "pdmm" };
                Box::new(super::Pdmm::new(name, partition.d(), *p, private)?)
            }
        })
    }

    /// The simulator's stand-in for node `node`'s private stream: derived from the run seed, so a simulated
    /// run stays deterministic per seed (and anyone holding the seed can regenerate it: the simulator is not
    /// a deployment). Never a VN's stream (those use purposes 0 and 1 of each identity).
    pub fn simulated_private(seed: u64, node: u64) -> ChaCha12Rng {
        vn_rng(seed, node, Stream::Algorithm)
    }
}

impl fmt::Display for AlgoSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Shatter => write!(f, "shatter"),
            Self::El => write!(f, "el"),
            Self::ElLocal => write!(f, "el-local"),
            Self::Chunking { chunks } => write!(f, "chunking:{chunks}"),
            Self::SparsifyRandom { fraction } => write!(f, "sparsify-random:{fraction}"),
            Self::SparsifyTopk { fraction } => write!(f, "sparsify-topk:{fraction}"),
            Self::Dpsgd => write!(f, "dpsgd"),
            Self::Muffliato { sigma } => write!(f, "muffliato:{sigma}"),
            Self::Ghp { sigma } => write!(f, "ghp:{sigma}"),
            Self::RandomNoise { sigma } => write!(f, "random:{sigma}"),
            // The shortest form that parses back to the same parameters.
            Self::Pdmm(p) => {
                let d = super::PdmmParams::pdmm(p.sigma_z);
                let zero = if p.warm_start { "" } else { "-zero" };
                if p.theta == 0.5 && (p.rho, p.mu) == (d.rho, d.mu) {
                    return write!(f, "admm{zero}:{}", p.sigma_z);
                }
                write!(f, "pdmm{zero}:{}", p.sigma_z)?;
                if (p.theta, p.rho, p.mu) != (d.theta, d.rho, d.mu) {
                    write!(f, ":{}", p.theta)?;
                }
                if (p.rho, p.mu) != (d.rho, d.mu) {
                    write!(f, ":{}", p.rho)?;
                }
                if p.mu != d.mu {
                    write!(f, ":{}", p.mu)?;
                }
                Ok(())
            }
        }
    }
}

impl FromStr for AlgoSpec {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let (name, arg) = match s.split_once(':') {
            Some((n, a)) => (n, Some(a)),
            None => (s, None),
        };
        let need = |what: &str| {
            arg.ok_or_else(|| format!("{name} needs {what}, e.g. {name}:{}", example(name)))
        };
        match name {
            "shatter" | "el" | "el-local" | "dpsgd" if arg.is_some() => {
                Err(format!("{name} takes no parameter"))
            }
            "shatter" => Ok(Self::Shatter),
            "el" => Ok(Self::El),
            "el-local" => Ok(Self::ElLocal),
            "dpsgd" => Ok(Self::Dpsgd),
            "ghp" | "random" => {
                let sigma: f64 = need("a noise level")?
                    .parse()
                    .map_err(|e| format!("{name}:SIGMA needs a number: {e}"))?;
                if !(sigma.is_finite() && sigma >= 0.0) {
                    return Err(format!("{name}:SIGMA needs σ ≥ 0, not {sigma}"));
                }
                Ok(if name == "ghp" {
                    Self::Ghp { sigma }
                } else {
                    Self::RandomNoise { sigma }
                })
            }
            "pdmm" | "admm" | "pdmm-zero" | "admm-zero" => {
                let args: Vec<&str> = need("σ_Z")?.split(':').collect();
                let admm = name.starts_with("admm");
                let max = if admm { 1 } else { 4 };
                if args.len() > max {
                    return Err(format!("{name} takes at most {max} parameters: {KNOWN}"));
                }
                let num = |i: usize, what: &str| -> Result<Option<f64>, String> {
                    args.get(i)
                        .map(|a| {
                            a.parse::<f64>()
                                .map_err(|e| format!("{name}: {what} needs a number: {e}"))
                        })
                        .transpose()
                };
                let sigma_z = num(0, "SIGMA_Z")?.unwrap_or_default();
                let mut p = if admm {
                    super::PdmmParams::admm(sigma_z)
                } else {
                    super::PdmmParams::pdmm(sigma_z)
                };
                p.theta = num(1, "THETA")?.unwrap_or(p.theta);
                p.rho = num(2, "RHO")?.unwrap_or(p.rho);
                p.mu = num(3, "MU")?.unwrap_or(p.mu);
                p.warm_start = !name.ends_with("-zero");
                p.validate().map_err(|e| format!("{name}: {e}"))?;
                Ok(Self::Pdmm(p))
            }
            "muffliato" => {
                let sigma: f32 = need("a noise level")?
                    .parse()
                    .map_err(|e| format!("muffliato:SIGMA needs a number: {e}"))?;
                if !(sigma.is_finite() && sigma >= 0.0) {
                    return Err(format!("muffliato:SIGMA needs σ ≥ 0, not {sigma}"));
                }
                Ok(Self::Muffliato { sigma })
            }
            "chunking" => {
                let chunks: usize = need("a number of chunks")?
                    .parse()
                    .map_err(|e| format!("chunking:K needs an integer K: {e}"))?;
                if chunks < 2 {
                    return Err("chunking:K needs K ≥ 2 (K = 1 is el)".into());
                }
                Ok(Self::Chunking { chunks })
            }
            "sparsify-random" | "sparsify-topk" => {
                let fraction: f64 = need("a fraction")?
                    .parse()
                    .map_err(|e| format!("{name}:F needs a number F: {e}"))?;
                if !(fraction > 0.0 && fraction < 1.0) {
                    return Err(format!("{name}:F needs 0 < F < 1, not {fraction}"));
                }
                Ok(if name == "sparsify-random" {
                    Self::SparsifyRandom { fraction }
                } else {
                    Self::SparsifyTopk { fraction }
                })
            }
            _ => Err(format!("unknown algorithm {s:?} (known: {KNOWN})")),
        }
    }
}

fn example(name: &str) -> &'static str {
    match name {
        "chunking" => "8",
        "muffliato" => "0.025",
        "ghp" | "random" => "0.3",
        "pdmm" | "admm" | "pdmm-zero" | "admm-zero" => "0.003",
        _ => "0.125",
    }
}

impl TryFrom<String> for AlgoSpec {
    type Error = String;
    fn try_from(s: String) -> Result<Self, String> {
        s.parse()
    }
}

impl From<AlgoSpec> for String {
    fn from(a: AlgoSpec) -> String {
        a.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_mistakes_say_what_is_wrong() {
        for s in [
            "shatter",
            "el",
            "el-local",
            "dpsgd",
            "chunking:8",
            "sparsify-random:0.125",
            "sparsify-topk:0.125",
            "muffliato:0.025",
            "ghp:0.3",
            "random:0.3",
            "pdmm:0.003",
            "pdmm:0:0.75",
            "pdmm:1:1:0.5:0.25",
            "admm:0.1",
            "pdmm-zero:0.003",
            "admm-zero:0.5",
            "pdmm-zero:0:1:0.1",
        ] {
            assert_eq!(s.parse::<AlgoSpec>().unwrap().to_string(), s);
        }
        let err = |s: &str| s.parse::<AlgoSpec>().unwrap_err();
        assert!(
            err("chunking").contains("chunking:8"),
            "{}",
            err("chunking")
        );
        assert!(err("chunking:1").contains("K ≥ 2"));
        assert!(err("sparsify-random:2").contains("0 < F < 1"));
        assert!(err("sparsify-topk:0").contains("sparsify-topk:F needs 0 < F < 1"));
        assert_eq!(
            AlgoSpec::SparsifyTopk { fraction: 0.125 }.payload_fraction(1),
            0.25
        );
        assert!(err("gossip").contains("known:"));
        assert!(err("muffliato:-1").contains("σ ≥ 0"));
        assert!(err("el:3").contains("no parameter"));
        assert_eq!(AlgoSpec::SparsifyRandom { fraction: 0.125 }.chunks(4), 8);
        assert_eq!(AlgoSpec::Chunking { chunks: 4 }.payload_fraction(1), 0.25);
        assert_eq!(AlgoSpec::Shatter.payload_fraction(8), 1.0);
        assert_eq!(AlgoSpec::Muffliato { sigma: 0.1 }.steps(), 10);
        assert!(AlgoSpec::Chunking { chunks: 8 }.check_vns(2).is_err());
        assert_eq!(AlgoSpec::from_vns(1), AlgoSpec::El);
        assert!(err("pdmm").contains("pdmm:0.003"));
        assert!(err("pdmm:0.1:2").contains("θ"), "{}", err("pdmm:0.1:2"));
        assert!(err("pdmm:-1").contains("σ_Z ≥ 0"));
        assert!(err("admm:0.1:1").contains("at most 1"));
        assert_eq!(
            "pdmm:0.2:0.5".parse::<AlgoSpec>().unwrap().to_string(),
            "admm:0.2",
            "θ = ½ is ADMM"
        );
        assert!(
            AlgoSpec::Pdmm(super::super::PdmmParams::pdmm(0.0))
                .check_vns(2)
                .is_err()
        );
    }
}
