//! Client-to-server secure aggregation by pairwise masks: the hierarchical mode of the GFL paper (Rizk,
//! Vlaski & Sayed, "Privatized Graph Federated Learning", eq. 48, after Bonawitz et al., CCS 2017), where
//! each federated unit p is a server with K clients, and the server must learn only the average
//! ψ_p = (1/L)·Σ_k w_k of the L clients it sampled (eq. 7), not any single client's model.
//!
//! # How
//! - **Keys.** Every client holds an X25519 secret and publishes its public key (the paper's Diffie–Hellman
//!   with a public generator; X25519 is the standard instance of it, from the `x25519-dalek` crate libp2p's
//!   Noise handshake already brings in). Two clients k and l get the same shared secret s_kl = s_lk without
//!   talking to each other; the server, which relays only public keys, does not learn it.
//! - **Masks.** A pair's mask stream for round i is ChaCha12 keyed by SHA-256(domain ‖ s_kl) on stream i: a
//!   fresh, independent mask per round from one key agreement.
//! - **Ring.** Models are encoded in fixed point, `round(v · 2^f)` as a two's-complement 64-bit integer, and
//!   everything is added modulo 2^64. Client k sends `enc(w_k) + Σ_{l>k} m_kl − Σ_{l<k} m_kl` over the other
//!   clients l of the round's cohort (the notes' sign rule; the paper gives none). In the server's sum every
//!   mask appears once with each sign and cancels **bit-exactly** (notes-gfl.md check V3), something float
//!   masks cannot do. The server decodes Σ_k enc(w_k) and divides by L: the mean to within 2^−f per
//!   coordinate (each encoding rounds by at most 2^−(f+1)).
//! - **Range.** The decoded sum must not wrap: [`FixedPoint::encode`] refuses values with |v| ≥
//!   2^(63−f) / `summands`, so a cohort of that many clients can never overflow (f = 32, L = 11: |v| < 1.9e8).
//!
//! # What this does not do
//! - **Dropouts.** A client that masks and then fails to send breaks the round: its masks stay in the sum
//!   and the decoded mean is garbage (tested). Bonawitz et al. recover by secret-sharing each client's
//!   mask seeds with the others; the GFL paper gives no dropout handling and neither does this module. A
//!   server must run the round again with the clients that answered.
//! - **Authentication of public keys.** The server relays the directory of public keys; a malicious server
//!   that substitutes keys can unmask (the standard honest-but-curious server assumption of the paper).
//!
//! The replication example (`examples/schemes_replication.rs`) runs the GFL synthetic regression with every
//! unit's ψ_p computed through these masks.

use std::collections::BTreeMap;

use rand::{Rng, RngCore, SeedableRng};
use rand_chacha::ChaCha12Rng;
use sha2::{Digest, Sha256};

use crate::{ModelsError, Result};

/// Fixed-point encoding in the ring of integers modulo 2^64.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FixedPoint {
    frac_bits: u32,
    summands: u32,
}

impl FixedPoint {
    /// Encodings with `frac_bits` fractional bits whose sum over up to `summands` clients cannot wrap.
    pub fn new(frac_bits: u32, summands: u32) -> Result<Self> {
        if !(1..=52).contains(&frac_bits) || summands == 0 {
            return Err(ModelsError::Config(format!(
                "fixed point needs 1 to 52 fractional bits and at least one summand, got {frac_bits} and \
                 {summands}"
            )));
        }
        Ok(Self {
            frac_bits,
            summands,
        })
    }

    /// The largest |v| [`FixedPoint::encode`] accepts: the sum of `summands` such values stays inside i64.
    pub fn max_abs(&self) -> f64 {
        2f64.powi(63 - self.frac_bits as i32) / self.summands as f64
    }

    /// Worst-case error of a decoded mean, per coordinate: each encoding rounds by at most half a unit.
    pub fn resolution(&self) -> f64 {
        2f64.powi(-(self.frac_bits as i32))
    }

    pub fn encode(&self, v: f64) -> Result<u64> {
        if !v.is_finite() || v.abs() >= self.max_abs() {
            return Err(ModelsError::Config(format!(
                "{v} cannot be masked: fixed point with {} fractional bits for {} clients holds |v| < {}",
                self.frac_bits,
                self.summands,
                self.max_abs()
            )));
        }
        Ok((v * 2f64.powi(self.frac_bits as i32)).round() as i64 as u64)
    }

    /// The real number a ring element (a sum of encodings) stands for.
    pub fn decode(&self, x: u64) -> f64 {
        x as i64 as f64 * self.resolution()
    }
}

/// A client's key-agreement secret (X25519).
#[derive(Clone)]
pub struct MaskingSecret([u8; 32]);

impl std::fmt::Debug for MaskingSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MaskingSecret(..)")
    }
}

/// A client's public key, what the server relays to the others.
pub type MaskingPublic = [u8; 32];

impl MaskingSecret {
    /// A secret from a seeded RNG (simulations; a deployment draws from the OS).
    pub fn from_rng<R: Rng + ?Sized>(rng: &mut R) -> Self {
        let mut b = [0u8; 32];
        rng.fill_bytes(&mut b);
        Self(b)
    }

    pub fn public(&self) -> MaskingPublic {
        x25519_dalek::x25519(self.0, x25519_dalek::X25519_BASEPOINT_BYTES)
    }

    /// The pair's mask key: SHA-256 of a domain tag and the X25519 shared secret. Refuses a public key of
    /// small order (shared secret all zero), with which a malicious peer would force a known mask.
    fn pair_key(&self, theirs: &MaskingPublic) -> Result<[u8; 32]> {
        let shared = x25519_dalek::x25519(self.0, *theirs);
        if shared == [0u8; 32] {
            return Err(ModelsError::Config(
                "a public key of small order gives a known shared secret".into(),
            ));
        }
        Ok(Sha256::new()
            .chain_update(b"shatter/gfl-pairwise-mask/v1")
            .chain_update(shared)
            .finalize()
            .into())
    }
}

/// One client's pair keys with every other client of its unit, from one key agreement each.
#[derive(Clone)]
pub struct PairwiseMasks {
    me: usize,
    keys: BTreeMap<usize, [u8; 32]>,
}

impl std::fmt::Debug for PairwiseMasks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PairwiseMasks")
            .field("me", &self.me)
            .field("peers", &self.keys.len())
            .finish()
    }
}

impl PairwiseMasks {
    /// Client `me` with `secret`, agreeing a key with every other entry of the unit's `directory` (client
    /// id, public key). Refuses a directory without `me` or with an id twice.
    pub fn new(
        me: usize,
        secret: &MaskingSecret,
        directory: &[(usize, MaskingPublic)],
    ) -> Result<Self> {
        let mut keys = BTreeMap::new();
        let mut found = false;
        for (id, public) in directory {
            if *id == me {
                found = true;
                continue;
            }
            if keys.insert(*id, secret.pair_key(public)?).is_some() {
                return Err(ModelsError::Config(format!(
                    "client {id} twice in the directory"
                )));
            }
        }
        if !found {
            return Err(ModelsError::Config(format!(
                "client {me} is not in its own directory"
            )));
        }
        Ok(Self { me, keys })
    }

    /// Client `me`'s masked message for `round`: `enc(model) + Σ_{l>me} m_l − Σ_{l<me} m_l` over the other
    /// members of `cohort` (the clients the server sampled this round, `me` among them).
    pub fn mask(
        &self,
        round: u64,
        cohort: &[usize],
        model: &[f64],
        fp: &FixedPoint,
    ) -> Result<Vec<u64>> {
        if !cohort.contains(&self.me) {
            return Err(ModelsError::Config(format!(
                "client {} masks for a cohort it is not in",
                self.me
            )));
        }
        if cohort.len() > fp.summands as usize {
            return Err(ModelsError::Config(format!(
                "a cohort of {} clients can overflow an encoding made for {}",
                cohort.len(),
                fp.summands
            )));
        }
        let mut out: Vec<u64> = model
            .iter()
            .map(|&v| fp.encode(v))
            .collect::<Result<_>>()?;
        let mut seen = std::collections::BTreeSet::new();
        for &l in cohort {
            if !seen.insert(l) {
                return Err(ModelsError::Config(format!("client {l} twice in the cohort")));
            }
            if l == self.me {
                continue;
            }
            let key = self.keys.get(&l).ok_or_else(|| {
                ModelsError::Config(format!("client {l} is not in client {}'s directory", self.me))
            })?;
            let mut prg = ChaCha12Rng::from_seed(*key);
            prg.set_stream(round);
            let add = l > self.me;
            for x in &mut out {
                let m = prg.next_u64();
                *x = if add {
                    x.wrapping_add(m)
                } else {
                    x.wrapping_sub(m)
                };
            }
        }
        Ok(out)
    }
}

/// The server's side: the mean of the cohort's models from their masked messages (the masks cancel in the
/// ring sum). Every cohort member's message must be there: see the module docs on dropouts.
pub fn unmask_mean(messages: &[Vec<u64>], fp: &FixedPoint) -> Result<Vec<f64>> {
    let Some(first) = messages.first() else {
        return Err(ModelsError::Config("no masked message to aggregate".into()));
    };
    if messages.len() > fp.summands as usize || messages.iter().any(|m| m.len() != first.len()) {
        return Err(ModelsError::Config(format!(
            "{} masked messages (at most {}) of lengths that must all be {}",
            messages.len(),
            fp.summands,
            first.len()
        )));
    }
    let mut sum = vec![0u64; first.len()];
    for m in messages {
        for (s, &x) in sum.iter_mut().zip(m) {
            *s = s.wrapping_add(x);
        }
    }
    let n = messages.len() as f64;
    Ok(sum.into_iter().map(|s| fp.decode(s) / n).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A unit of `k` clients with their secrets and pair keys.
    fn unit(k: usize, seed: u64) -> Vec<PairwiseMasks> {
        let mut rng = ChaCha12Rng::seed_from_u64(seed);
        let secrets: Vec<MaskingSecret> = (0..k).map(|_| MaskingSecret::from_rng(&mut rng)).collect();
        let directory: Vec<(usize, MaskingPublic)> =
            secrets.iter().enumerate().map(|(i, s)| (i, s.public())).collect();
        (0..k)
            .map(|i| PairwiseMasks::new(i, &secrets[i], &directory).unwrap())
            .collect()
    }

    fn models(n: usize, dim: usize, seed: u64) -> Vec<Vec<f64>> {
        let mut rng = ChaCha12Rng::seed_from_u64(seed);
        (0..n)
            .map(|_| (0..dim).map(|_| rng.random_range(-5.0..5.0)).collect())
            .collect()
    }

    /// Check V3 of notes-gfl.md: the masks of a cohort sum to zero bit-exactly, so the server's ring sum is
    /// exactly the sum of the encodings, and its mean is the clients' mean to within 2^−f.
    #[test]
    fn masks_cancel_bit_exactly_and_the_server_gets_the_mean() {
        let clients = unit(20, 1);
        let fp = FixedPoint::new(32, 11).unwrap();
        let cohort = [0, 3, 4, 7, 9, 11, 12, 15, 16, 18, 19];
        let zero = vec![0.0; 64];
        let masks: Vec<Vec<u64>> =
            cohort.iter().map(|&c| clients[c].mask(5, &cohort, &zero, &fp).unwrap()).collect();
        assert!(masks.iter().all(|m| m.iter().any(|&x| x != 0)), "every mask is non-zero");
        let sum = masks.iter().fold(vec![0u64; 64], |acc, m| {
            acc.iter().zip(m).map(|(a, b)| a.wrapping_add(*b)).collect()
        });
        assert!(sum.iter().all(|&s| s == 0), "masks cancel exactly: {sum:?}");

        let ws = models(cohort.len(), 64, 2);
        let masked: Vec<Vec<u64>> = cohort
            .iter()
            .zip(&ws)
            .map(|(&c, w)| clients[c].mask(5, &cohort, w, &fp).unwrap())
            .collect();
        let mean = unmask_mean(&masked, &fp).unwrap();
        for (j, m) in mean.iter().enumerate() {
            let truth = ws.iter().map(|w| w[j]).sum::<f64>() / ws.len() as f64;
            assert!((m - truth).abs() <= fp.resolution(), "coordinate {j}: {m} vs {truth}");
        }
    }

    /// What the server sees of one client is the model under a uniformly random mask: about half the bits
    /// set, a different mask every round, and no trace of the model (a zero model and a large one give
    /// messages equally far from their encodings).
    #[test]
    fn a_single_masked_message_hides_the_model() {
        let clients = unit(4, 3);
        let fp = FixedPoint::new(32, 4).unwrap();
        let cohort = [0, 1, 2, 3];
        let w = vec![1.5; 4096];
        let r1 = clients[2].mask(1, &cohort, &w, &fp).unwrap();
        let r2 = clients[2].mask(2, &cohort, &w, &fp).unwrap();
        let enc = fp.encode(1.5).unwrap();
        assert!(r1.iter().all(|&x| x != enc), "no coordinate sent in the clear");
        let differ = r1.iter().zip(&r2).filter(|(a, b)| a != b).count();
        assert_eq!(differ, r1.len(), "a fresh mask every round");
        let ones: u32 = r1.iter().map(|x| x.count_ones()).sum();
        let share = ones as f64 / (64.0 * r1.len() as f64);
        assert!((0.49..0.51).contains(&share), "bits set: {share}");
    }

    /// Both ends of a pair derive the same key; the same seed gives the same masks (simulations are
    /// reproducible).
    #[test]
    fn pair_keys_agree_and_are_seeded() {
        let a = unit(5, 7);
        let b = unit(5, 7);
        assert_eq!(a[1].keys[&3], a[3].keys[&1]);
        assert_ne!(a[1].keys[&3], a[1].keys[&2]);
        let fp = FixedPoint::new(20, 5).unwrap();
        let w = [0.25, -1.0];
        assert_eq!(
            a[4].mask(9, &[0, 4], &w, &fp).unwrap(),
            b[4].mask(9, &[0, 4], &w, &fp).unwrap()
        );
    }

    /// The limit this module states rather than handles: a client that masked and then did not send
    /// leaves its masks in the others' messages, and the decoded mean is far off.
    #[test]
    fn a_missing_client_breaks_the_round_instead_of_biasing_it_quietly() {
        let clients = unit(6, 5);
        let fp = FixedPoint::new(32, 6).unwrap();
        let cohort = [0, 1, 2, 3, 4, 5];
        let ws = models(6, 8, 6);
        let masked: Vec<Vec<u64>> = cohort
            .iter()
            .zip(&ws)
            .map(|(&c, w)| clients[c].mask(0, &cohort, w, &fp).unwrap())
            .collect();
        let mean = unmask_mean(&masked[..5], &fp).unwrap();
        assert!(mean.iter().all(|m| m.abs() > 1e3), "{mean:?}");
    }

    #[test]
    fn refuses_what_would_wrap_or_is_not_a_number_and_bad_directories() {
        let fp = FixedPoint::new(32, 11).unwrap();
        assert!(fp.encode(f64::NAN).is_err() && fp.encode(f64::INFINITY).is_err());
        assert!(fp.encode(fp.max_abs()).is_err());
        assert!(fp.encode(-fp.max_abs() * 0.99).is_ok());
        assert!(FixedPoint::new(0, 1).is_err() && FixedPoint::new(32, 0).is_err());
        let mut rng = ChaCha12Rng::seed_from_u64(1);
        let s = MaskingSecret::from_rng(&mut rng);
        let t = MaskingSecret::from_rng(&mut rng);
        assert!(PairwiseMasks::new(0, &s, &[(1, t.public())]).is_err(), "me missing");
        assert!(
            PairwiseMasks::new(0, &s, &[(0, s.public()), (1, t.public()), (1, t.public())]).is_err(),
            "an id twice"
        );
        assert!(
            PairwiseMasks::new(0, &s, &[(0, s.public()), (1, [0u8; 32])]).is_err(),
            "a small-order key"
        );
        let c = unit(3, 2);
        assert!(c[0].mask(0, &[1, 2], &[0.0], &fp).is_err(), "not in the cohort");
        assert!(c[0].mask(0, &[0, 1, 1], &[0.0], &fp).is_err(), "a cohort member twice");
        assert!(unmask_mean(&[], &fp).is_err());
        assert!(unmask_mean(&[vec![0], vec![0, 0]], &fp).is_err());
    }
}
